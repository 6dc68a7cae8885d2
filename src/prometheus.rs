//! The Prometheus text exposition format (version 0.0.4), written by hand
//! for the service's `/metrics` (`metrics/`) and the worker's
//! (`worker/metrics.rs`): a family's `# HELP` and `# TYPE` lines, a
//! histogram's samples, and label values escaped.
//!
//! Why not the `prometheus-client` crate: it is not in the dependency tree
//! (it would add itself, a derive macro and a few small crates to a clean
//! build on two cores, for about twenty families), it writes OpenMetrics,
//! whose `# TYPE` lines name a counter without its `_total` and end with
//! `# EOF`, and the families' names are a contract: the dashboards and
//! alerts in deploy/ and `promtool check metrics` in the tests read them
//! as they are. What the two exporters shared is here instead.

use std::fmt::Write as _;

/// Writes a family's `# HELP` and `# TYPE` lines; returns `name`, for its samples.
pub fn family(out: &mut String, name: &'static str, kind: &str, help: &str) -> &'static str {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    name
}

/// Writes one histogram's samples: `buckets[i]` counts the observations
/// at most `bounds[i]` (cumulative), then `+Inf`, the sum and the count.
/// `labels` are the histogram's own, written (`route="/v1/x"`), or empty.
pub fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[f64], buckets: &[u64], sum: f64, count: u64) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, n) in bounds.iter().zip(buckets) {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let labels = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
    let _ = writeln!(out, "{name}_sum{labels} {sum}\n{name}_count{labels} {count}");
}

/// A label value escaped as the format asks (backslash, quote, newline).
pub fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_with_and_without_labels() {
        let mut out = String::new();
        let n = family(&mut out, "x_seconds", "histogram", "How long.");
        histogram(&mut out, n, "route=\"/a\"", &[0.1, 1.0], &[1, 2], 0.5, 3);
        histogram(&mut out, n, "", &[0.1], &[0], 0.0, 0);
        assert_eq!(
            out,
            "# HELP x_seconds How long.\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{route=\"/a\",le=\"0.1\"} 1\nx_seconds_bucket{route=\"/a\",le=\"1\"} 2\n\
             x_seconds_bucket{route=\"/a\",le=\"+Inf\"} 3\nx_seconds_sum{route=\"/a\"} 0.5\nx_seconds_count{route=\"/a\"} 3\n\
             x_seconds_bucket{le=\"0.1\"} 0\nx_seconds_bucket{le=\"+Inf\"} 0\nx_seconds_sum 0\nx_seconds_count 0\n"
        );
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
