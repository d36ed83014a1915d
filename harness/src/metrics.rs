//! Reads a service's `/metrics` (Prometheus text, parsed by `prometheus-parse`): the only
//! place the harness parses it. A series the caller asks for that the service does not
//! export is an error, never a zero: a renamed or missing metric must fail the check that
//! reads it.

use anyhow::{Context, bail};
use prometheus_parse::{Sample, Scrape, Value};

/// One scrape.
#[derive(Debug)]
pub struct Metrics {
    scrape: Scrape,
}

impl Metrics {
    /// Parses Prometheus text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
            .context("parse Prometheus text")?;
        Ok(Self { scrape })
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.scrape.samples.iter().filter(move |s| {
            s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
    }

    /// The sum of the series of `name` whose labels include every pair of `labels`. Errs
    /// when no such series is exported, or when `name` is a histogram or summary.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<f64> {
        let mut total = 0.0;
        let mut found = 0;
        for sample in self.matching(name, labels) {
            total += match sample.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                _ => bail!("{name} is a histogram or summary: read it with buckets()"),
            };
            found += 1;
        }
        if found == 0 {
            bail!("no series {name}{labels:?} is exported (absent is not zero)");
        }
        Ok(total)
    }

    /// The cumulative buckets `(le, count)` of histogram `name`, summed over the series whose
    /// labels include `labels`, in ascending `le`. Errs when no such series is exported.
    pub fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Vec<(f64, f64)>> {
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        let mut found = 0;
        for sample in self.matching(name, labels) {
            let Value::Histogram(counts) = &sample.value else {
                bail!("{name} is not a histogram");
            };
            for count in counts {
                match buckets.iter_mut().find(|(le, _)| *le == count.less_than) {
                    Some((_, n)) => *n += count.count,
                    None => buckets.push((count.less_than, count.count)),
                }
            }
            found += 1;
        }
        if found == 0 {
            bail!("no histogram {name}{labels:?} is exported (absent is not zero)");
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE x counter\nx{outcome=\"acked\",a=\"1\"} 3\nx{outcome=\"fenced\"} 1\n\
        # TYPE h histogram\nh_bucket{o=\"a\",le=\"0.1\"} 1\nh_bucket{o=\"a\",le=\"+Inf\"} 2\n\
        h_bucket{o=\"b\",le=\"0.1\"} 3\nh_bucket{o=\"b\",le=\"+Inf\"} 3\nh_sum{o=\"a\"} 0.5\nh_count{o=\"a\"} 2\n\
        y 0\n";

    #[test]
    fn sums_matching_series_and_refuses_absent_ones() {
        let m = Metrics::parse(TEXT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.sum("x", &[("outcome", "acked")]).ok(), Some(3.0));
        assert_eq!(m.sum("x", &[]).ok(), Some(4.0));
        assert_eq!(m.sum("y", &[]).ok(), Some(0.0), "a zero that is exported");
        assert_eq!(m.sum("h_count", &[("o", "a")]).ok(), Some(2.0));
        assert!(m.sum("z", &[]).is_err(), "an absent metric is an error");
        assert!(
            m.sum("x", &[("outcome", "lost")]).is_err(),
            "so is an absent series"
        );
        assert!(m.sum("h", &[]).is_err(), "a histogram has no single value");
    }

    #[test]
    fn histogram_buckets_sum_over_series() {
        let m = Metrics::parse(TEXT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            m.buckets("h", &[]).ok(),
            Some(vec![(0.1, 4.0), (f64::INFINITY, 5.0)])
        );
        assert_eq!(
            m.buckets("h", &[("o", "a")]).ok(),
            Some(vec![(0.1, 1.0), (f64::INFINITY, 2.0)])
        );
        assert!(m.buckets("nope", &[]).is_err());
    }
}
