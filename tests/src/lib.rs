//! End-to-end suites live in tests/*.rs; this library holds nothing.
