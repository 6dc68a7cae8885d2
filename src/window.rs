//! The stateless dedup-window analysis (placeholder; being written).
