//! Recent results of a pure function, kept by their input: for work a reconcile repeats on
//! inputs that rarely change (the planner judges the same adopted unit text and renders the
//! same unit on every pass, and again after every step of a converge).
//!
//! # Guarantees
//! - A result is returned only for an input **equal** to the one it was computed from (compared
//!   whole, not hashed): a changed input is computed again, so the memo never answers stale.
//! - Bounded: at most `max` inputs are kept (the oldest goes first), and a caller keeps no input
//!   larger than it can afford (see its `max` and its own size check).
//!
//! Caveat: a memo is one per thread (`thread_local!` at each use): nothing is shared or locked,
//! and a thread that never repeats an input pays one comparison per kept input.

use std::borrow::Borrow;
use std::collections::VecDeque;

/// At most `max` recent `(input, result)` pairs.
pub struct Recent<K, V> {
    items: VecDeque<(K, V)>,
    max: usize,
}

impl<K, V: Clone> Recent<K, V> {
    /// An empty memo keeping at most `max` inputs.
    pub const fn new(max: usize) -> Self {
        Recent {
            items: VecDeque::new(),
            max,
        }
    }

    /// The result for `key`: remembered when an equal input was seen, else `compute(key)`,
    /// remembered when it is `Some` (a `None` is computed again each time: errors stay rare
    /// and unshared).
    pub fn get<Q>(&mut self, key: &Q, compute: impl FnOnce(&Q) -> Option<V>) -> Option<V>
    where
        K: Borrow<Q>,
        Q: PartialEq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some((_, v)) = self.items.iter().find(|(k, _)| k.borrow() == key) {
            return Some(v.clone());
        }
        let v = compute(key)?;
        if self.max == 0 {
            return Some(v);
        }
        if self.items.len() == self.max {
            self.items.pop_front();
        }
        self.items.push_back((key.to_owned(), v.clone()));
        Some(v)
    }

    /// How many inputs are kept.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests;
