//! How a store call that must be answered is retried (the embedding
//! layer's `finish`; the worker's script calls, `worker/attempt.rs`): tried
//! again after 50 ms, the wait doubling to at most 1 s, for as long as a
//! deadline allows. One policy, run by `backon`.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};
use tokio::time::Instant;

/// The first wait after a failed call.
pub const FIRST_WAIT: Duration = Duration::from_millis(50);

/// The longest wait between two calls.
pub const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// The waits between calls: [`FIRST_WAIT`], doubling, at most
/// [`LONGEST_WAIT`], no jitter; they end when the next wait would reach
/// `until`.
pub fn waits_until(until: Instant) -> impl backon::Backoff {
    ExponentialBuilder::new()
        .with_min_delay(FIRST_WAIT)
        .with_max_delay(LONGEST_WAIT)
        .with_factor(2.0)
        .without_max_times()
        .build()
        .take_while(move |wait| Instant::now() + *wait < until)
}

/// Calls `call` until it answers `Ok`, or fails when the next wait would
/// reach `until` (that failure is the result). `on_retry` sees each failure
/// that is retried, with the wait before the next call.
pub async fn until_answered<T, E, Fut>(
    until: Instant,
    call: impl FnMut() -> Fut,
    on_retry: impl FnMut(&E, Duration),
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    call.retry(waits_until(until)).sleep(tokio::time::sleep).notify(on_retry).await
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn waits_double_to_a_second_and_stop_before_the_deadline() {
        let far = Instant::now() + Duration::from_secs(3600);
        let waits: Vec<u64> = waits_until(far).take(7).map(|w| w.as_millis() as u64).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(waits_until(Instant::now() + Duration::from_millis(120)).count(), 2, "50 and 100 fit, 200 not");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_retried_until_it_answers_or_the_deadline() {
        let calls = Cell::new(0);
        let seen = Cell::new(Vec::new());
        let until = Instant::now() + Duration::from_secs(10);
        let answer = until_answered(
            until,
            || async {
                calls.set(calls.get() + 1);
                if calls.get() < 4 { Err(calls.get()) } else { Ok("done") }
            },
            |e: &u32, wait| seen.set([seen.take(), vec![(*e, wait.as_millis())]].concat()),
        )
        .await;
        assert_eq!(answer, Ok("done"));
        assert_eq!(seen.take(), [(1, 50), (2, 100), (3, 200)]);
        let start = Instant::now();
        let never: Result<(), &str> =
            until_answered(start + Duration::from_millis(400), || async { Err("down") }, |_, _| {}).await;
        assert_eq!(never, Err("down"));
        assert!(start.elapsed() < Duration::from_millis(400), "no wait reaches past the deadline");
    }
}
