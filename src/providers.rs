//! Webhook provider adapters (placeholder; being written).
