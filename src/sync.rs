//! Locks that outlive a panic. A thread that panics while holding a
//! `std::sync::Mutex` poisons it, and `lock().expect(..)` would then panic
//! on every later request: one bug would take the whole service down. The
//! state behind idemgate's locks (counters, the memory store's maps, the
//! worker's held entries) stays usable after such a panic, so every lock is
//! taken here, recovering the guard from a poisoned mutex, and so is every
//! wait on a condition variable, which takes the lock again when it wakes.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, WaitTimeoutResult};
use std::time::Duration;

/// Locks `mutex`, recovering it when an earlier holder panicked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` for at most `timeout`, recovering the guard as [`lock`] does.
pub fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    condvar.wait_timeout(guard, timeout).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` while `condition` holds, for at most `timeout`,
/// recovering the guard as [`lock`] does.
pub fn wait_timeout_while<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
    condition: impl FnMut(&mut T) -> bool,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    condvar.wait_timeout_while(guard, timeout, condition).unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_recovered_with_its_state() {
        let counter = std::sync::Arc::new(Mutex::new(1));
        let held = counter.clone();
        let _ = std::thread::spawn(move || {
            let mut n = held.lock().unwrap();
            *n += 1;
            panic!("a bug while holding the lock");
        })
        .join();
        assert!(counter.is_poisoned());
        assert_eq!(*lock(&counter), 2);
    }
}
