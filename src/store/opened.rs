//! [`OpenedStore`]: a store as the gate was given it, so that the views
//! above the stores find their way back to the ones they can read.

use std::sync::Arc;

use super::Store;
use super::memory::MemoryStore;
use super::redis_store::RedisStore;

/// A store as the gate was given it: one of idemgate's own, whose records
/// the ops API and the console can read ([`crate::ops::Source::of`]), or
/// one of the embedding application's, which they cannot. Knowing which at
/// the place the store is made (`StoreConfig::open`, `Gate::new`) is what
/// lets the views above the store find their way back to it without a
/// downcast.
#[derive(Clone)]
pub enum OpenedStore {
    /// The in-memory store.
    Memory(Arc<MemoryStore>),
    /// A Redis namespace.
    Redis(Arc<RedisStore>),
    /// A store of the caller's own.
    Own(Arc<dyn Store>),
}

impl std::ops::Deref for OpenedStore {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        match self {
            OpenedStore::Memory(s) => s.as_ref(),
            OpenedStore::Redis(s) => s.as_ref(),
            OpenedStore::Own(s) => s.as_ref(),
        }
    }
}

impl From<MemoryStore> for OpenedStore {
    fn from(store: MemoryStore) -> Self {
        OpenedStore::Memory(Arc::new(store))
    }
}

impl From<Arc<MemoryStore>> for OpenedStore {
    fn from(store: Arc<MemoryStore>) -> Self {
        OpenedStore::Memory(store)
    }
}

impl From<RedisStore> for OpenedStore {
    fn from(store: RedisStore) -> Self {
        OpenedStore::Redis(Arc::new(store))
    }
}

impl From<Arc<RedisStore>> for OpenedStore {
    fn from(store: Arc<RedisStore>) -> Self {
        OpenedStore::Redis(store)
    }
}

/// A store behind `dyn Store` is the caller's own, even when it is one of
/// idemgate's: pass the concrete store for the ops views to read it.
impl From<Arc<dyn Store>> for OpenedStore {
    fn from(store: Arc<dyn Store>) -> Self {
        OpenedStore::Own(store)
    }
}
