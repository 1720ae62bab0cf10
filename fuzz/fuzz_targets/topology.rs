//! `BUILD_TOPOLOGY.toml` (`Topology::parse`, which validates), then what callers ask of it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(topology) = quarry_topology::Topology::parse(text) else { return };
    for stage in topology.build_order() {
        let _ = topology.produced(&stage);
        let _ = topology.inbound(&stage);
        let _ = topology.stage_deps(&stage);
    }
    let _ = topology.build_jobs(&[]);
    let _ = quarry_topology::families::AmdgpuTargets::parse_cmake(text, "fuzz");
});
