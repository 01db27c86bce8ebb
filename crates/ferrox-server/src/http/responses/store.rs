//! Stored responses (`store: true`) for `previous_response_id` and `GET /v1/responses/{id}`:
//! in memory, bounded by count and bytes, the oldest evicted first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// How much the store keeps.
#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    pub responses: usize,
    /// Total JSON size of the kept conversations and response objects.
    pub bytes: usize,
}

impl Default for StoreLimits {
    fn default() -> StoreLimits {
        StoreLimits {
            responses: 1024,
            bytes: 256 << 20,
        }
    }
}

/// One kept response.
#[derive(Debug, Clone)]
pub(in crate::http) struct Stored {
    /// The response object as returned.
    pub response: Arc<Value>,
    /// The conversation through this response, as chat messages without `instructions`
    /// (a later request's own instructions replace them, as the API specifies).
    pub history: Arc<Vec<Value>>,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Stored>,
    order: VecDeque<String>,
    bytes: usize,
}

/// The store; cheap to share.
#[derive(Default)]
pub(in crate::http) struct Store {
    limits: StoreLimits,
    inner: Mutex<Inner>,
}

impl Store {
    pub fn new(limits: StoreLimits) -> Store {
        Store {
            limits,
            inner: Mutex::default(),
        }
    }

    pub fn get(&self, id: &str) -> Option<Stored> {
        self.lock().by_id.get(id).cloned()
    }

    /// Keeps a response, evicting the oldest past the limits; one larger than the byte limit
    /// alone is not kept.
    pub fn put(&self, id: String, response: Value, history: Vec<Value>) {
        let bytes =
            response.to_string().len() + history.iter().map(|m| m.to_string().len()).sum::<usize>();
        if bytes > self.limits.bytes || self.limits.responses == 0 {
            return;
        }
        let mut g = self.lock();
        while g.order.len() >= self.limits.responses || g.bytes + bytes > self.limits.bytes {
            let Some(old) = g.order.pop_front() else {
                break;
            };
            if let Some(s) = g.by_id.remove(&old) {
                g.bytes -= s.bytes;
            }
        }
        g.bytes += bytes;
        g.order.push_back(id.clone());
        let stored = Stored {
            response: Arc::new(response),
            history: Arc::new(history),
            bytes,
        };
        g.by_id.insert(id, stored);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves whole entries behind: the data stays usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evicts_oldest_past_count_and_bytes() {
        let s = Store::new(StoreLimits {
            responses: 2,
            bytes: 1000,
        });
        for i in 0..3 {
            s.put(format!("r{i}"), json!({"n": i}), vec![]);
        }
        assert!(s.get("r0").is_none());
        assert!(s.get("r1").is_some() && s.get("r2").is_some());
        // 997 bytes: with either 7-byte entry beside it the total passes 1000.
        s.put("big".into(), json!("x".repeat(995)), vec![]);
        assert!(s.get("r1").is_none() && s.get("r2").is_none());
        assert!(s.get("big").is_some());
        s.put("huge".into(), json!("x".repeat(2000)), vec![]);
        assert!(s.get("huge").is_none() && s.get("big").is_some());
    }
}
