//! The index state's two-half parse (`index/src/state/io.rs`): its scanner cuts the JSON
//! between two entries without parsing it, so whatever it accepts must be exactly what the
//! one-thread parse gives for the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quarry_index::fuzz_state_halves(data);
});
