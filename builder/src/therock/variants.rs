//! `quarry package python --variants`: the kpack device wheels built a second time as wheel
//! variants (PEP 825) of one distribution, `rocm-sdk-device`, beside the extras-based
//! `rocm-sdk-device-{target}` ones, from the same populated (and RPATH-edited) files.
//!
//! One variant per GPU target, labelled with the target (`gfx942`), holding the property
//! `amd :: gfx_arch :: gfx942` (PEP 825's example namespace and feature). Each wheel carries
//! `rocm_sdk_device-{version}.dist-info/variant.json` in the format with a `providers` table
//! (what `variantlib` 0.2.2 reads and Quarry's index accepts): one namespace, `amd`, served by
//! the `amd-variant-provider` plugin, not optional (without the provider an installer must not
//! guess a GPU). The bytes are fixed by the target alone: keys in order, no timestamps.

use std::collections::{BTreeMap, BTreeSet};

use quarry_packaging::therock::base_target;
use quarry_packaging::therock::wheels::{DistKind, PlannedWheel, WheelOptions, WheelPlan, file_name_part};
use quarry_packaging::{NULL_VARIANT_LABEL, is_variant_label};
use serde::Serialize;

use super::PackageError;
use crate::python::{BuiltDist, Populated, WheelContext, build_runtime_wheel_with};
use crate::wheel::Member;

/// The distribution every device variant wheel belongs to.
pub const VARIANT_DIST: &str = "rocm-sdk-device";
/// The JSON schema `variantlib` 0.2.2 writes and validates (the format with `providers`).
pub const VARIANT_SCHEMA: &str = "https://variants-schema.wheelnext.dev/v0.2.0.json";
/// The variant namespace and feature of a device wheel's property (`amd :: gfx_arch :: gfx942`).
pub const NAMESPACE: &str = "amd";
pub const FEATURE: &str = "gfx_arch";
/// The provider plugin an installer runs to learn the machine's `amd :: gfx_arch` values.
pub const PROVIDER_REQUIRES: &str = "amd-variant-provider";
pub const PROVIDER_PLUGIN_API: &str = "amd_variant_provider.plugin:AMDVariantPlugin";

/// Which device wheels `--variants` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum VariantRequest {
    /// No variant wheels (no `--variants`).
    #[default]
    Off,
    /// Every GPU target the plan has a device wheel for (`--variants` alone, or `all`).
    All,
    /// These targets (`--variants gfx942,gfx1100`), each checked against the plan.
    Targets(Vec<String>),
}

/// Why `--variants` cannot be honoured. Messages are written for the person at the terminal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariantsError {
    #[error("--variants {0:?}: not a GPU target (gfx and its number in lower case, e.g. gfx942, gfx90a or gfx1100)")]
    NotATarget(String),
    #[error(
        "--variants {target}: no device wheel for {target}, the artifacts (and --target) give device wheels for {}",
        if known.is_empty() { "no target".to_owned() } else { known.join(", ") }
    )]
    UnknownTarget { target: String, known: Vec<String> },
    #[error(
        "--variants builds the per-target device wheels, which only the kpack layout has (--enable-kpack, or flags.KPACK_SPLIT_ARTIFACTS in therock_manifest.json); these artifacts are packaged per family"
    )]
    NotKpack,
    #[error("--variants: the artifacts hold no GPU target, so there is no device wheel to build as a variant")]
    NoTargets,
}

impl VariantRequest {
    /// Parses the value of `--variants`: `all` (or empty), else targets separated by commas,
    /// semicolons or spaces (`:xnack…` stripped, as `--target` does).
    pub fn parse(raw: &str) -> Result<Self, VariantsError> {
        let parts: Vec<&str> = raw.split([',', ';', ' ']).map(str::trim).filter(|p| !p.is_empty()).collect();
        if parts.is_empty() || parts == ["all"] {
            return Ok(VariantRequest::All);
        }
        let mut targets = Vec::new();
        for part in parts {
            let target = base_target(part);
            let digits = target.strip_prefix("gfx").unwrap_or_default();
            let ok = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
                && is_variant_label(target)
                && target != NULL_VARIANT_LABEL;
            if !ok {
                return Err(VariantsError::NotATarget(part.to_owned()));
            }
            targets.push(target.to_owned());
        }
        Ok(VariantRequest::Targets(targets))
    }

    /// The targets of `plan`'s device wheels to build as variants too (none when off).
    pub(crate) fn resolve(&self, plan: &WheelPlan, kpack: bool) -> Result<BTreeSet<String>, VariantsError> {
        if *self == VariantRequest::Off {
            return Ok(BTreeSet::new());
        }
        if !kpack {
            return Err(VariantsError::NotKpack);
        }
        let devices: BTreeSet<String> = plan
            .wheels
            .iter()
            .filter_map(|w| match &w.kind {
                DistKind::Device(target) => Some(target.clone()),
                _ => None,
            })
            .collect();
        let wanted: BTreeSet<String> = match self {
            VariantRequest::Targets(targets) => targets.iter().cloned().collect(),
            _ => devices.clone(),
        };
        if wanted.is_empty() {
            return Err(VariantsError::NoTargets);
        }
        if let Some(target) = wanted.iter().find(|t| !devices.contains(*t)) {
            return Err(VariantsError::UnknownTarget { target: target.clone(), known: devices.into_iter().collect() });
        }
        Ok(wanted)
    }
}

/// Writes the variant wheel of `device` from its populated files when its target is in
/// `targets`.
pub(crate) fn build_variant(
    ctx: &WheelContext<'_>,
    device: &PlannedWheel,
    populated: &Populated,
    targets: &BTreeSet<String>,
) -> Result<Option<BuiltDist>, PackageError> {
    if !matches!(&device.kind, DistKind::Device(t) if targets.contains(t)) {
        return Ok(None);
    }
    let Some((wheel, json)) = variant_wheel(device, ctx.opts) else { return Ok(None) };
    build_runtime_wheel_with(ctx, &wheel, populated, vec![json])
        .map(Some)
        .map_err(|source| PackageError::Wheel { file: wheel.file_name.clone(), source })
}

/// The variant wheel of a planned device wheel: the same files and import package, the
/// `rocm-sdk-device` distribution, the target as the variant label, `variant.json` beside
/// METADATA.
pub(crate) fn variant_wheel(device: &PlannedWheel, opts: &WheelOptions) -> Option<(PlannedWheel, Member)> {
    let DistKind::Device(target) = &device.kind else { return None };
    let stem = format!("{}-{}", file_name_part(VARIANT_DIST), opts.version);
    let dist_info = format!("{stem}.dist-info");
    let wheel = PlannedWheel {
        dist: VARIANT_DIST.to_owned(),
        file_name: format!("{stem}-py3-none-{}-{target}.whl", opts.platform),
        metadata: variant_metadata(target, &opts.version),
        dist_info: dist_info.clone(),
        ..device.clone()
    };
    let json = Member::bytes(format!("{dist_info}/variant.json"), variant_json(target));
    Some((wheel, json))
}

/// METADATA of a device variant wheel.
fn variant_metadata(target: &str, version: &str) -> String {
    format!(
        "Metadata-Version: 2.1\nName: {VARIANT_DIST}\nVersion: {version}\n\
         Summary: ROCm SDK device libraries for one GPU target, as a wheel variant (PEP 825): {NAMESPACE} :: {FEATURE} :: {target}\n\
         Requires-Dist: rocm-sdk-libraries=={version}\n"
    )
}

#[derive(Serialize)]
struct VariantJson<'a> {
    #[serde(rename = "$schema")]
    schema: &'a str,
    #[serde(rename = "default-priorities")]
    default_priorities: Priorities<'a>,
    providers: BTreeMap<&'a str, Provider<'a>>,
    variants: BTreeMap<&'a str, BTreeMap<&'a str, BTreeMap<&'a str, Vec<&'a str>>>>,
}

#[derive(Serialize)]
struct Priorities<'a> {
    namespace: Vec<&'a str>,
}

#[derive(Serialize)]
struct Provider<'a> {
    #[serde(rename = "plugin-api")]
    plugin_api: &'a str,
    requires: Vec<&'a str>,
}

/// The `variant.json` of the device variant wheel for `target`: pretty JSON, a final newline.
pub fn variant_json(target: &str) -> Vec<u8> {
    let properties = BTreeMap::from([(NAMESPACE, BTreeMap::from([(FEATURE, vec![target])]))]);
    let json = VariantJson {
        schema: VARIANT_SCHEMA,
        default_priorities: Priorities { namespace: vec![NAMESPACE] },
        providers: BTreeMap::from([(
            NAMESPACE,
            Provider { plugin_api: PROVIDER_PLUGIN_API, requires: vec![PROVIDER_REQUIRES] },
        )]),
        variants: BTreeMap::from([(target, properties)]),
    };
    let mut out = serde_json::to_vec_pretty(&json).expect("variant.json serializes");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_refuse_what_is_not_a_target() {
        assert_eq!(VariantRequest::parse("").unwrap(), VariantRequest::All);
        assert_eq!(VariantRequest::parse("all").unwrap(), VariantRequest::All);
        assert_eq!(
            VariantRequest::parse("gfx942, gfx90a:xnack-;gfx1100").unwrap(),
            VariantRequest::Targets(vec!["gfx942".into(), "gfx90a".into(), "gfx1100".into()])
        );
        for bad in ["mi300x", "GFX942", "gfx", "gfx94-2", "gfx1234567890123456"] {
            assert_eq!(VariantRequest::parse(bad), Err(VariantsError::NotATarget(bad.into())), "{bad}");
        }
    }

    fn plan(targets: &[&str]) -> WheelPlan {
        let wheel = |kind: DistKind| PlannedWheel {
            dist: kind.dist_name(),
            file_name: String::new(),
            dist_info: String::new(),
            pure_package: None,
            platform_package: "_rocm_sdk_libraries".into(),
            selection: quarry_packaging::therock::wheels::Selection { dirs: vec![], include: &[], exclude: &[] },
            metadata: String::new(),
            entry_points: None,
            kind,
        };
        let mut wheels = vec![wheel(DistKind::Core)];
        wheels.extend(targets.iter().map(|t| wheel(DistKind::Device((*t).into()))));
        let sdist = quarry_packaging::therock::wheels::PlannedSdist {
            file_name: String::new(),
            root: String::new(),
            pkg_info: String::new(),
            dist_info_py: String::new(),
        };
        WheelPlan { wheels, targets: targets.iter().map(|t| (*t).into()).collect(), sdist }
    }

    #[test]
    fn requests_resolve_against_the_plan() {
        let two = plan(&["gfx1100", "gfx942"]);
        assert!(VariantRequest::Off.resolve(&two, false).unwrap().is_empty());
        assert_eq!(
            VariantRequest::All.resolve(&two, true).unwrap(),
            BTreeSet::from(["gfx1100".into(), "gfx942".into()])
        );
        let one = VariantRequest::parse("gfx942").unwrap();
        assert_eq!(one.resolve(&two, true).unwrap(), BTreeSet::from(["gfx942".into()]));
        let err =
            |request: &VariantRequest, plan: &WheelPlan, kpack| request.resolve(plan, kpack).unwrap_err().to_string();
        insta::assert_snapshot!(err(&VariantRequest::parse("gfx90a").unwrap(), &two, true), @"--variants gfx90a: no device wheel for gfx90a, the artifacts (and --target) give device wheels for gfx1100, gfx942");
        insta::assert_snapshot!(err(&VariantRequest::All, &two, false), @"--variants builds the per-target device wheels, which only the kpack layout has (--enable-kpack, or flags.KPACK_SPLIT_ARTIFACTS in therock_manifest.json); these artifacts are packaged per family");
        insta::assert_snapshot!(err(&VariantRequest::All, &plan(&[]), true), @"--variants: the artifacts hold no GPU target, so there is no device wheel to build as a variant");
    }

    #[test]
    fn variant_wheels_keep_the_device_files_under_their_own_name() {
        let opts = WheelOptions {
            version: "7.1.0".into(),
            nonce: String::new(),
            kpack: true,
            platform: "linux_x86_64".into(),
            targets: vec![],
        };
        let device = &plan(&["gfx942"]).wheels[1];
        let (wheel, json) = variant_wheel(device, &opts).unwrap();
        assert_eq!(wheel.file_name, "rocm_sdk_device-7.1.0-py3-none-linux_x86_64-gfx942.whl");
        assert_eq!(wheel.dist_info, "rocm_sdk_device-7.1.0.dist-info");
        assert_eq!((wheel.kind, wheel.platform_package), (device.kind.clone(), device.platform_package.clone()));
        assert!(wheel.metadata.starts_with("Metadata-Version: 2.1\nName: rocm-sdk-device\nVersion: 7.1.0\n"));
        assert!(wheel.metadata.ends_with("Requires-Dist: rocm-sdk-libraries==7.1.0\n"));
        assert_eq!(json.path, "rocm_sdk_device-7.1.0.dist-info/variant.json");
        assert!(variant_wheel(&plan(&[]).wheels[0], &opts).is_none(), "only device wheels have variants");
    }

    #[test]
    fn variant_json_is_what_the_index_accepts() {
        let json = variant_json("gfx942");
        let parsed = quarry_index::variant::VariantMetadata::parse_wheel(&json, "gfx942").unwrap();
        assert_eq!(
            quarry_index::variant::describe(parsed.properties("gfx942").unwrap()),
            "[amd :: gfx_arch :: gfx942]"
        );
        assert_eq!(parsed.to_json(), json, "the index republishes the same bytes for one variant");
        insta::assert_snapshot!("variant_json_gfx942", String::from_utf8(json).unwrap());
    }
}
