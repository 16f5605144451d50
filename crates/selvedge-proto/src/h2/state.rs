//! HTTP/2 stream states (RFC 9113 §5.1).

/// A stream's state, as either end sees it (neither side pushes, so there are no reserved
/// states); drawn here from the server's side, where the peer's HEADERS open it:
///
/// ```text
///                          +--------+
///                          |  idle  |
///                          +--------+
///                              |
///                              | recv H
///                              v
///                          +--------+
///                  recv ES |        | send ES
///                  ,-------|  open  |-------.
///                 /        |        |        \
///                v         +--------+         v
///         +----------+          |           +----------+
///         |   half-  |          |           |   half-  |
///         |  closed  |          | send R /  |  closed  |
///         | (remote) |          | recv R    | (local)  |
///         +----------+          |           +----------+
///              |                |                 |
///              | send ES /      |       recv ES / |
///              | send R /       v        send R / |
///              | recv R     +--------+   recv R   |
///              `----------->|        |<-----------'
///                           | closed |
///                           +--------+
/// ```
///
/// (RFC 9113 §5.1. Idle streams are not stored: an id above the last one seen is idle; a
/// closed stream is removed from the map and remembered for a while.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Both sides may send.
    Open,
    /// The client sent END_STREAM; we may still send.
    HalfClosedRemote,
    /// We sent END_STREAM; the client may still send (its request body).
    HalfClosedLocal,
    /// Nothing more in either direction.
    Closed,
}

impl State {
    /// After receiving END_STREAM.
    #[inline]
    pub fn recv_end(self) -> State {
        match self {
            State::Open => State::HalfClosedRemote,
            State::HalfClosedLocal => State::Closed,
            s => s,
        }
    }

    /// After sending END_STREAM.
    #[inline]
    pub fn send_end(self) -> State {
        match self {
            State::Open => State::HalfClosedLocal,
            State::HalfClosedRemote => State::Closed,
            s => s,
        }
    }

    /// Whether the peer may still send on the stream (its END_STREAM has not arrived).
    #[inline]
    pub fn can_recv(self) -> bool {
        matches!(self, State::Open | State::HalfClosedLocal)
    }

    /// Whether this side may still send on the stream (it has not sent END_STREAM).
    #[inline]
    pub fn can_send(self) -> bool {
        matches!(self, State::Open | State::HalfClosedRemote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions() {
        assert_eq!(State::Open.recv_end(), State::HalfClosedRemote);
        assert_eq!(State::Open.send_end(), State::HalfClosedLocal);
        assert_eq!(State::HalfClosedLocal.recv_end(), State::Closed);
        assert_eq!(State::HalfClosedRemote.send_end(), State::Closed);
        assert!(!State::HalfClosedRemote.can_recv());
        assert!(State::HalfClosedLocal.can_recv());
        assert!(State::HalfClosedRemote.can_send() && !State::HalfClosedLocal.can_send());
        assert!(!State::Closed.can_send() && !State::Closed.can_recv());
    }
}
