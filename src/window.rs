//! The stateless dedup-window analysis (placeholder; being written).

/// Placeholder.
pub fn analyze_str(_body: &str) -> Result<serde_json::Value, String> {
    Err("not yet available".into())
}
