//! File names and versions: wheel/sdist/dist file names, PEP 503 names, PEP 440 versions and
//! specifiers, `DebVersion` (dpkg order must be a total order), rpm EVR, artifact names.
#![no_main]

use std::cmp::Ordering;

use libfuzzer_sys::fuzz_target;
use quarry_packaging::{
    DebVersion, DistFilename, PackageName, SdistFilename, Version, VersionSpecifiers, WheelFilename,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Two inputs for the comparisons: split at the first NUL (or compare with itself).
    let (a, b) = text.split_once('\0').unwrap_or((text, text));
    for s in [a, b] {
        if let Ok(w) = s.parse::<WheelFilename>() {
            assert_eq!(w.as_str(), s);
            let _ = w.dist_info_hint();
        }
        let _ = s.parse::<SdistFilename>();
        let _ = s.parse::<DistFilename>();
        let _ = PackageName::new(s);
        let _ = s.parse::<VersionSpecifiers>();
        let _ = quarry_artifacts::ArtifactName::parse_archive(s);
        let _ = quarry_artifacts::ArtifactName::parse_dir(s);
    }
    if let (Ok(x), Ok(y)) = (a.parse::<Version>(), b.parse::<Version>()) {
        assert_eq!(x.cmp(&y), y.cmp(&x).reverse(), "PEP 440 order of {a:?} and {b:?}");
    }
    if let (Ok(x), Ok(y)) = (a.parse::<DebVersion>(), b.parse::<DebVersion>()) {
        assert_eq!(x.cmp(&y), y.cmp(&x).reverse(), "dpkg order of {a:?} and {b:?}");
        assert_eq!(x.cmp(&x), Ordering::Equal);
    }
    let evr = quarry_index::dnf::evr_str_cmp(a, b);
    assert_eq!(evr, quarry_index::dnf::evr_str_cmp(b, a).reverse(), "rpm order of {a:?} and {b:?}");
});
