//! Wasm metrics, stored under Envoy's stats names.
//!
//! Envoy (`Context::defineMetric`, `source/extensions/common/wasm/context.cc`) prefixes every
//! name with the custom stat namespace `wasmcustom`, hands out ids whose low two bits are the
//! type (counter 0, gauge 1, histogram 2, `Wasm::kMetricTypeMask`), and defining a name twice
//! yields a new id for the same stat.

use std::collections::BTreeMap;

use crate::abi::status;

/// The prefix Envoy gives every wasm metric.
pub const STAT_PREFIX: &str = "wasmcustom.";

const TYPE_MASK: u32 = 0x3;
const ID_INCREMENT: u32 = 0x4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter = 0,
    Gauge = 1,
    Histogram = 2,
}

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    next_id: [u32; 3],
    ids: BTreeMap<u32, String>,
    values: BTreeMap<String, u64>,
    histograms: BTreeMap<String, Vec<u64>>,
}

impl Metrics {
    pub(crate) fn define(&mut self, raw_type: u32, name: &str) -> Result<u32, i32> {
        let kind = match raw_type {
            0 => Kind::Counter,
            1 => Kind::Gauge,
            2 => Kind::Histogram,
            _ => return Err(status::BAD_ARGUMENT),
        };
        let slot = self
            .next_id
            .get_mut(kind as usize)
            .ok_or(status::BAD_ARGUMENT)?;
        let id = (*slot * ID_INCREMENT) | kind as u32;
        *slot = slot.saturating_add(1);
        let stat = format!("{STAT_PREFIX}{name}");
        if kind == Kind::Histogram {
            self.histograms.entry(stat.clone()).or_default();
        } else {
            self.values.entry(stat.clone()).or_insert(0);
        }
        self.ids.insert(id, stat);
        Ok(id)
    }

    fn kind(id: u32) -> Option<Kind> {
        match id & TYPE_MASK {
            0 => Some(Kind::Counter),
            1 => Some(Kind::Gauge),
            2 => Some(Kind::Histogram),
            _ => None,
        }
    }

    /// `incrementMetric`: counters only go up (offset <= 0 is `BadArgument`), gauges both ways.
    pub(crate) fn increment(&mut self, id: u32, offset: i64) -> i32 {
        let Some(kind) = Self::kind(id) else {
            return status::BAD_ARGUMENT;
        };
        if kind == Kind::Histogram {
            return status::BAD_ARGUMENT;
        }
        let Some(value) = self.ids.get(&id).and_then(|s| self.values.get_mut(s)) else {
            return status::NOT_FOUND;
        };
        match (kind, offset > 0) {
            (Kind::Counter, false) => status::BAD_ARGUMENT,
            (_, true) => {
                *value = value.wrapping_add(offset.unsigned_abs());
                status::OK
            }
            (_, false) => {
                *value = value.wrapping_sub(offset.unsigned_abs());
                status::OK
            }
        }
    }

    /// `recordMetric`: a counter adds, a gauge sets, a histogram records.
    pub(crate) fn record(&mut self, id: u32, value: u64) -> i32 {
        let Some(stat) = self.ids.get(&id) else {
            return status::NOT_FOUND;
        };
        match Self::kind(id) {
            Some(Kind::Counter) => {
                if let Some(v) = self.values.get_mut(stat) {
                    *v = v.wrapping_add(value);
                }
                status::OK
            }
            Some(Kind::Gauge) => {
                self.values.insert(stat.clone(), value);
                status::OK
            }
            Some(Kind::Histogram) => {
                self.histograms.entry(stat.clone()).or_default().push(value);
                status::OK
            }
            None => status::NOT_FOUND,
        }
    }

    /// `getMetric`: histograms cannot be read (`BadArgument`).
    pub(crate) fn get(&self, id: u32) -> Result<u64, i32> {
        match Self::kind(id) {
            Some(Kind::Counter | Kind::Gauge) => self
                .ids
                .get(&id)
                .and_then(|s| self.values.get(s))
                .copied()
                .ok_or(status::NOT_FOUND),
            _ => Err(status::BAD_ARGUMENT),
        }
    }

    /// A counter or gauge by the guest's name or by Envoy's stats name.
    pub(crate) fn value(&self, name: &str) -> Option<u64> {
        self.values
            .get(name)
            .or_else(|| self.values.get(&format!("{STAT_PREFIX}{name}")))
            .copied()
    }

    /// A histogram's recorded values by the guest's name or by Envoy's stats name.
    pub(crate) fn histogram(&self, name: &str) -> Option<&[u64]> {
        self.histograms
            .get(name)
            .or_else(|| self.histograms.get(&format!("{STAT_PREFIX}{name}")))
            .map(Vec::as_slice)
    }
}
