//! Histograms for the hot paths, each thread counting its own observations in memory no other
//! thread writes; a scrape adds the threads' counts up. An observation of a prometheus
//! `Histogram` shared by every thread is four atomic read-modify-writes on cache lines that the
//! two cores keep taking from each other: with three on every keyed API request (the request,
//! its store call and the rate-limit check), they cost a noticeable share of its CPU time
//! (docs/performance.md#the-api). Here an observation is a few plain loads and stores.
//!
//! The text a scrape gives is the same as a prometheus `HistogramVec`'s fed the same values
//! (the tests compare them). A thread's series outlives the thread: when the thread ends, its
//! counts are added to totals kept by label values, so they never go back, and the threads
//! that come and go (blocking-pool threads) do not grow the list. Sums are kept in whole
//! nanoseconds, so adding the same observations up in another order gives the same sum (in
//! floating point, a scrape could see a sum one unit lower than the last, which `rate()`
//! reads as a reset).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::proto;

/// A histogram vector whose series are counted per thread; see the module doc.
#[derive(Clone)]
pub struct PerThreadHistogramVec {
    inner: Arc<Inner>,
}

struct Inner {
    desc: Desc,
    bounds: Box<[f64]>,
    /// The live threads' series.
    series: Mutex<Vec<Arc<Counts>>>,
    /// The counts of ended threads' series, by label values.
    retired: Mutex<BTreeMap<Vec<String>, Totals>>,
}

/// One thread's counts of one label set; only that thread writes them.
struct Counts {
    labels: Vec<String>,
    /// Observations at most each bound and above the one before it.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

#[derive(Clone, Default)]
struct Totals {
    buckets: Vec<u64>,
    count: u64,
    sum_nanos: u64,
}

impl Totals {
    /// Reads the buckets before the count, which `ThreadSeries::observe` writes the other way
    /// round: a scrape never sees more in a bucket than in the count (`+Inf`).
    fn add(&mut self, counts: &Counts) {
        self.buckets.resize(counts.buckets.len(), 0);
        for (total, bucket) in self.buckets.iter_mut().zip(counts.buckets.iter()) {
            *total = total.saturating_add(bucket.load(Ordering::Acquire));
        }
        self.sum_nanos = self
            .sum_nanos
            .saturating_add(counts.sum_nanos.load(Ordering::Acquire));
        self.count = self
            .count
            .saturating_add(counts.count.load(Ordering::Acquire));
    }
}

/// The calling thread's series of one label set: kept by that thread (in a thread-local) and
/// never handed to another, which is what lets an observation skip atomic read-modify-writes.
pub struct ThreadSeries {
    counts: Arc<Counts>,
    vec: Arc<Inner>,
    _one_thread: PhantomData<*const ()>,
}

impl ThreadSeries {
    pub fn observe(&self, seconds: f64) {
        let counts = &*self.counts;
        bump(&counts.count, 1);
        // `as` saturates: a negative or NaN time counts as none.
        bump(&counts.sum_nanos, (seconds * 1e9).round() as u64);
        if let Some(i) = self.vec.bounds.iter().position(|bound| seconds <= *bound) {
            bump(&counts.buckets[i], 1);
        }
    }
}

/// The thread is done with the series: its counts join the totals of its label values.
impl Drop for ThreadSeries {
    fn drop(&mut self) {
        // The same order of locks as `totals`.
        let mut series = lock(&self.vec.series);
        let mut retired = lock(&self.vec.retired);
        series.retain(|counts| !Arc::ptr_eq(counts, &self.counts));
        retired
            .entry(self.counts.labels.clone())
            .or_default()
            .add(&self.counts);
    }
}

/// One writer: a load and a store, not a locked add.
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).saturating_add(by),
        Ordering::Release,
    );
}

impl PerThreadHistogramVec {
    /// `bounds` are the buckets' upper bounds, finite and increasing (`+Inf` is implied).
    pub fn new(
        name: &str,
        help: &str,
        labels: &[&str],
        bounds: Vec<f64>,
    ) -> prometheus::Result<Self> {
        if bounds.is_empty()
            || bounds.iter().any(|b| !b.is_finite())
            || bounds.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(prometheus::Error::Msg(format!(
                "{name}: bucket bounds must be finite and increasing, got {bounds:?}"
            )));
        }
        if labels.contains(&"le") {
            return Err(prometheus::Error::Msg(format!(
                "{name}: `le` is the buckets' own label"
            )));
        }
        let desc = Desc::new(
            name.to_owned(),
            help.to_owned(),
            labels.iter().map(|l| (*l).to_owned()).collect(),
            Default::default(),
        )?;
        Ok(PerThreadHistogramVec {
            inner: Arc::new(Inner {
                desc,
                bounds: bounds.into(),
                series: Mutex::default(),
                retired: Mutex::default(),
            }),
        })
    }

    /// A new series of these label values (one per label, in order) for the calling thread,
    /// which keeps it and observes through it. Panics on a wrong number of values, as
    /// prometheus's `with_label_values` does: the callers name their labels in code.
    pub fn thread_series(&self, label_values: &[&str]) -> ThreadSeries {
        assert_eq!(
            label_values.len(),
            self.inner.desc.variable_labels.len(),
            "{}: one value per label",
            self.inner.desc.fq_name
        );
        let counts = Arc::new(Counts {
            labels: label_values.iter().map(|v| (*v).to_owned()).collect(),
            buckets: self
                .inner
                .bounds
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        });
        lock(&self.inner.series).push(counts.clone());
        ThreadSeries {
            counts,
            vec: self.inner.clone(),
            _one_thread: PhantomData,
        }
    }

    /// Observes `seconds` in the calling thread's series of `name`, for a vector of one label
    /// whose values are names fixed in code (an operation, a backend). Its series are kept in a
    /// thread-local, found by where the vector and the name are: a name spelled at two places
    /// gets two series, which a scrape adds up like any others.
    pub fn observe_named(&self, name: &'static str, seconds: f64) {
        let at = (
            Arc::as_ptr(&self.inner) as usize,
            name.as_ptr() as usize,
            name.len(),
        );
        let cached = NAMED.try_with(|series| {
            series
                .borrow_mut()
                .entry(at)
                .or_insert_with(|| self.thread_series(&[name]))
                .observe(seconds)
        });
        // A thread being torn down has no thread-locals left: a series of its own, for this one.
        if cached.is_err() {
            self.thread_series(&[name]).observe(seconds);
        }
    }

    /// Shows these label values' series from now on, at zero until observed: a series that
    /// appears only with its first observations hides them from `rate()`, which takes a new
    /// series' first sample as its start.
    pub fn declare(&self, label_values: &[&str]) {
        let labels: Vec<String> = label_values.iter().map(|v| (*v).to_owned()).collect();
        lock(&self.inner.retired)
            .entry(labels)
            .or_insert_with(|| Totals {
                buckets: vec![0; self.inner.bounds.len()],
                ..Totals::default()
            });
    }

    /// Every label set's totals: the ended threads' plus the live threads'.
    fn totals(&self) -> BTreeMap<Vec<String>, Totals> {
        let series = lock(&self.inner.series);
        let mut totals = lock(&self.inner.retired).clone();
        for counts in series.iter() {
            totals.entry(counts.labels.clone()).or_default().add(counts);
        }
        totals
    }
}

thread_local! {
    /// Each thread's series of `observe_named`, by where their vector and name are (addresses,
    /// which no client chooses, so a fast hasher).
    static NAMED: std::cell::RefCell<
        std::collections::HashMap<(usize, usize, usize), ThreadSeries, foldhash::fast::RandomState>,
    > = std::cell::RefCell::default();
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Collector for PerThreadHistogramVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.inner.desc]
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let desc = &self.inner.desc;
        let metrics = self
            .totals()
            .into_iter()
            .map(|(values, totals)| {
                let mut labels: Vec<proto::LabelPair> = desc
                    .variable_labels
                    .iter()
                    .zip(values)
                    .map(|(name, value)| {
                        let mut pair = proto::LabelPair::default();
                        pair.set_name(name.clone());
                        pair.set_value(value);
                        pair
                    })
                    .collect();
                // By name, as prometheus's own vectors give them.
                labels.sort_by(|a, b| a.name().cmp(b.name()));
                let mut cumulative = 0;
                let buckets = self
                    .inner
                    .bounds
                    .iter()
                    .zip(totals.buckets.iter().chain(std::iter::repeat(&0)))
                    .map(|(bound, count)| {
                        cumulative += count;
                        let mut bucket = proto::Bucket::default();
                        bucket.set_cumulative_count(cumulative);
                        bucket.set_upper_bound(*bound);
                        bucket
                    })
                    .collect();
                let mut histogram = proto::Histogram::default();
                histogram.set_sample_count(totals.count);
                histogram.set_sample_sum(totals.sum_nanos as f64 / 1e9);
                histogram.set_bucket(buckets);
                let mut metric = proto::Metric::from_label(labels);
                metric.set_histogram(histogram);
                metric
            })
            .collect();
        let mut family = proto::MetricFamily::default();
        family.set_name(desc.fq_name.clone());
        family.set_help(desc.help.clone());
        family.set_field_type(proto::MetricType::HISTOGRAM);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, HistogramOpts, HistogramVec, Registry, TextEncoder};

    const BOUNDS: [f64; 4] = [0.001, 0.01, 0.1, 1.0];

    fn text(collector: Box<dyn Collector>) -> String {
        let registry = Registry::new();
        registry.register(collector).unwrap();
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn threads_add_up_to_what_a_shared_histogram_shows_and_ended_threads_still_count() {
        let ours =
            PerThreadHistogramVec::new("t_seconds", "A test.", &["op", "kind"], BOUNDS.to_vec())
                .unwrap();
        let theirs = HistogramVec::new(
            HistogramOpts::new("t_seconds", "A test.").buckets(BOUNDS.to_vec()),
            &["op", "kind"],
        )
        .unwrap();
        // Values between the bounds and above the last, from several threads at once: 512ths of
        // a second, whole nanoseconds that a float holds exactly, so both sums are exact.
        let values = |t: usize| (0..500).map(move |i| ((i * 7 + t) % 1500) as f64 / 512.0);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (ours, theirs) = (&ours, &theirs);
                scope.spawn(move || {
                    let kind = if t % 2 == 0 { "even" } else { "odd" };
                    let mine = ours.thread_series(&["read", kind]);
                    for v in values(t) {
                        mine.observe(v);
                        theirs.with_label_values(&["read", kind]).observe(v);
                    }
                });
            }
        });
        // The four threads have ended: their series are folded in, and stay counted.
        let expected = text(Box::new(theirs));
        assert_eq!(text(Box::new(ours.clone())), expected);
        assert!(
            lock(&ours.inner.series).is_empty(),
            "ended series are let go"
        );
        assert_eq!(lock(&ours.inner.retired).len(), 2, "kept by label values");
        assert_eq!(text(Box::new(ours.clone())), expected, "a second scrape");

        // A live thread's series is counted too, beside the ended ones.
        let live = ours.thread_series(&["read", "odd"]);
        live.observe(0.5);
        let totals = ours.totals();
        let odd = &totals[&vec!["read".to_owned(), "odd".to_owned()]];
        assert_eq!(odd.count, 1001);
        assert_eq!(totals.values().map(|t| t.count).sum::<u64>(), 2001);
    }

    #[test]
    fn named_series_are_kept_per_thread_and_add_up() {
        let vec =
            PerThreadHistogramVec::new("t_seconds", "A test.", &["op"], BOUNDS.to_vec()).unwrap();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for _ in 0..3 {
                        vec.observe_named("read", 0.5);
                    }
                    assert_eq!(NAMED.with(|n| n.borrow().len()), 1, "one series a thread");
                });
            }
        });
        let read = &vec.totals()[&vec!["read".to_owned()]];
        assert_eq!((read.count, read.sum_nanos), (6, 3_000_000_000));
    }

    #[test]
    fn bounds_and_labels_are_checked_and_series_can_be_declared() {
        let new = |labels: &[&str], bounds: Vec<f64>| {
            PerThreadHistogramVec::new("t_seconds", "A test.", labels, bounds)
        };
        assert!(new(&["op"], vec![0.1, 0.1]).is_err(), "not increasing");
        assert!(
            new(&["op"], vec![0.1, f64::INFINITY]).is_err(),
            "+Inf is implied"
        );
        assert!(new(&["op"], vec![]).is_err());
        assert!(new(&["le"], vec![0.1]).is_err());
        let ok = new(&["op"], vec![0.1]).unwrap();
        ok.declare(&["idle"]);
        let idle = &ok.totals()[&vec!["idle".to_owned()]];
        assert_eq!(
            (idle.count, idle.buckets.as_slice()),
            (0, &[0][..]),
            "declared at zero"
        );
        let wrong = std::panic::catch_unwind(|| ok.thread_series(&["a", "b"]));
        assert!(wrong.is_err(), "one value per label");
    }
}
