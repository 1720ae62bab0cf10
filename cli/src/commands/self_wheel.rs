//! `quarry self-wheel` (hidden; `scripts/build-wheel` runs it): this very binary packed as a
//! wheel, as uv and ruff ship theirs (maturin's `bindings = "bin"`): the executable is the
//! wheel's one script (`quarry-{version}.data/scripts/quarry[.exe]`), so `pip install` puts it
//! on PATH. Packing the binary that runs means no second compile and no version mismatch.
//!
//! The platform tag comes from the executable's header: `linux_{arch}` for ELF (honest: the
//! binary links the build machine's glibc, so no manylinux promise is made; pass
//! `--platform-tag` after checking one), `win_amd64` / `win_arm64` for PE.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use quarry_builder::wheel::{Member, Source, write_wheel};

/// The distribution name.
const NAME: &str = "quarry";

#[derive(Debug, clap::Args)]
pub(crate) struct SelfWheelArgs {
    /// Directory the wheel is written to (created if missing).
    #[arg(long, default_value = "dist")]
    out: PathBuf,
    /// The wheel's platform tag (default: from the executable: `linux_x86_64`, `win_amd64`, …).
    #[arg(long)]
    platform_tag: Option<String>,
}

pub(crate) fn run(args: &SelfWheelArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let header = read_header(&exe)?;
    let tag = match &args.platform_tag {
        Some(tag) => check_tag(tag)?,
        None => platform_tag(&header).with_context(|| format!("{}: pass --platform-tag", exe.display()))?,
    };
    let version: pep440_rs::Version =
        env!("CARGO_PKG_VERSION").parse().context("the crate version is not a PEP 440 version")?;
    let script = if header.starts_with(b"MZ") { format!("{NAME}.exe") } else { NAME.to_owned() };
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let wheel = args.out.join(format!("{NAME}-{version}-py3-none-{tag}.whl"));
    let dist_info = format!("{NAME}-{version}.dist-info");
    let members = vec![Member {
        path: format!("{NAME}-{version}.data/scripts/{script}"),
        mode: 0o755,
        source: Source::File(exe.clone()),
    }];
    let info = vec![
        Member::bytes(format!("{dist_info}/METADATA"), metadata(&version)),
        Member::bytes(format!("{dist_info}/WHEEL"), wheel_file(&version, &tag)),
    ];
    let mtime = super::source_date_epoch()?.unwrap_or(0);
    let report = write_wheel(&wheel, members, &dist_info, info, mtime, true)?;
    use std::io::Write as _;
    writeln!(std::io::stdout().lock(), "{} {} sha256={}", wheel.display(), report.size, report.sha256)?;
    Ok(())
}

/// `METADATA` (core metadata 2.1).
fn metadata(version: &pep440_rs::Version) -> String {
    format!(
        "Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {}\nLicense: {}\n",
        env!("CARGO_PKG_DESCRIPTION"),
        env!("CARGO_PKG_LICENSE"),
    )
}

/// `WHEEL`: not purelib (a platform binary), one tag.
fn wheel_file(version: &pep440_rs::Version, tag: &str) -> String {
    format!("Wheel-Version: 1.0\nGenerator: quarry {version}\nRoot-Is-Purelib: false\nTag: py3-none-{tag}\n")
}

/// The first bytes of the executable: enough for the ELF header and the PE header's offset.
fn read_header(exe: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut head = Vec::new();
    std::fs::File::open(exe)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .with_context(|| format!("reading {}", exe.display()))?;
    Ok(head)
}

/// The platform tag an executable's header implies.
fn platform_tag(head: &[u8]) -> anyhow::Result<String> {
    let u16_at = |at: usize, little: bool| {
        let b = head.get(at..at + 2)?;
        Some(if little { u16::from_le_bytes([b[0], b[1]]) } else { u16::from_be_bytes([b[0], b[1]]) })
    };
    if head.starts_with(b"\x7fELF") {
        let little = head.get(5) == Some(&1);
        return Ok(match u16_at(18, little) {
            Some(62) => "linux_x86_64",
            Some(183) => "linux_aarch64",
            other => bail!("an ELF executable for machine {other:?}, which no wheel tag is known for"),
        }
        .to_owned());
    }
    if head.starts_with(b"MZ") {
        let pe = head.get(0x3c..0x40).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let machine = pe.filter(|&at| head.get(at..at + 4) == Some(b"PE\0\0")).and_then(|at| u16_at(at + 4, true));
        return Ok(match machine {
            Some(0x8664) => "win_amd64",
            Some(0xaa64) => "win_arm64",
            other => bail!("a PE executable for machine {other:?}, which no wheel tag is known for"),
        }
        .to_owned());
    }
    bail!("neither an ELF nor a PE executable")
}

/// A platform tag given by hand: lowercase letters, digits and `_` (PEP 425).
fn check_tag(tag: &str) -> anyhow::Result<String> {
    let ok = !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(super::UsageError::new(format!(
            "--platform-tag {tag:?} is not a platform tag (manylinux_2_28_x86_64, linux_x86_64, win_amd64)"
        ))
        .into());
    }
    Ok(tag.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_tags_come_from_the_header() {
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.resize(20, 0);
        elf[18] = 62;
        assert_eq!(platform_tag(&elf).unwrap(), "linux_x86_64");
        elf[18] = 183;
        assert_eq!(platform_tag(&elf).unwrap(), "linux_aarch64");
        elf[18] = 3;
        assert!(platform_tag(&elf).is_err());
        let mut pe = vec![0u8; 0x90];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c] = 0x80;
        pe[0x80..0x84].copy_from_slice(b"PE\0\0");
        pe[0x84..0x86].copy_from_slice(&0x8664u16.to_le_bytes());
        assert_eq!(platform_tag(&pe).unwrap(), "win_amd64");
        assert_eq!(platform_tag(b"#!/bin/sh").unwrap_err().to_string(), "neither an ELF nor a PE executable");
        assert!(check_tag("manylinux_2_28_x86_64").is_ok() && check_tag("Linux x86").is_err());
    }

    #[test]
    fn metadata_and_wheel_files() {
        let version: pep440_rs::Version = "0.1.0".parse().unwrap();
        assert_eq!(
            wheel_file(&version, "linux_x86_64"),
            "Wheel-Version: 1.0\nGenerator: quarry 0.1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
        );
        assert!(metadata(&version).starts_with("Metadata-Version: 2.1\nName: quarry\nVersion: 0.1.0\n"));
    }
}
