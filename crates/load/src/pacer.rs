//! When requests may be issued. The engine asks the pacer for permission whenever a connection
//! has a free slot; the pacer answers how many requests may go now.
//!
//! Closed loop (wrk, httpress): as many as there are free slots, until the `-n` budget is spent.
//! The open-loop rate pacer arrives as another variant with the same questions, so the event loop
//! does not change with the load model.

#[derive(Debug, Clone)]
pub(crate) enum Pacer {
    /// Issue on every free slot; `remaining` is the `-n` budget when there is one.
    Closed { remaining: Option<u64> },
}

impl Pacer {
    pub(crate) fn closed(budget: Option<u64>) -> Self {
        Pacer::Closed { remaining: budget }
    }

    /// Grants up to `want` requests now; returns how many were granted.
    #[inline]
    pub(crate) fn grant(&mut self, want: u64) -> u64 {
        match self {
            Pacer::Closed { remaining: None } => want,
            Pacer::Closed { remaining: Some(left) } => {
                let n = want.min(*left);
                *left -= n;
                n
            }
        }
    }

    /// No request will ever be granted again.
    pub(crate) fn exhausted(&self) -> bool {
        matches!(self, Pacer::Closed { remaining: Some(0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_never_exceeded() {
        let mut p = Pacer::closed(Some(5));
        assert_eq!(p.grant(3), 3);
        assert_eq!(p.grant(3), 2);
        assert_eq!(p.grant(3), 0);
        assert!(p.exhausted());
        let mut unbounded = Pacer::closed(None);
        assert_eq!(unbounded.grant(7), 7);
        assert!(!unbounded.exhausted());
    }
}
