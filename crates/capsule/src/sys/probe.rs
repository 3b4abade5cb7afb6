//! Raw probes for `capsule check`: placeholder being written by a helper session.
