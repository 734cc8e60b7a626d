//! `irn exec -- PROGRAM ARGS…`: runs an unmodified RDMA program over irn.
//!
//! The program is started with irn's libibverbs (the `irn-ibverbs` crate's `libibverbs.so`)
//! ahead of the system's on the loader's path, under every soname such a program links:
//! `libibverbs.so.1`, `librdmacm.so.1`, and the provider libraries perftest links directly
//! (`libmlx5.so.1`, `libefa.so.1`), whose direct verbs the shim refuses. The device
//! configuration travels in the environment the shim reads (`IRN_IBV_*`, see
//! `irn_ibverbs::config`), so a program started some other way with the same variables and
//! `LD_LIBRARY_PATH` behaves the same.
//!
//! The sonames are symbolic links in a directory of the user's own (mode 0700, checked to be
//! theirs, under `$XDG_RUNTIME_DIR` or the temporary directory), made afresh for each library
//! path; nothing needs root.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::{Context, Error, Result};

/// The sonames the shim stands in for.
pub const SONAMES: [&str; 4] = [
    "libibverbs.so.1",
    "librdmacm.so.1",
    "libmlx5.so.1",
    "libefa.so.1",
];

/// `irn exec`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ExecArgs {
    /// Loss recovery of the program's queue pairs: `roce` (go-back-N; any RoCE peer, Linux
    /// rxe included) or `irn` (both ends irn).
    #[arg(long, default_value = "roce", value_parser = ["roce", "irn"])]
    pub mode: String,
    /// The program's devices, one per entry (`irn0`, `irn1`, …): an address, or an interface
    /// (its first IPv4 address, else its first IPv6 address that is not link-local), each
    /// optionally `NAME=`; by default every interface that is up with an IPv4 address.
    #[arg(long = "addr", value_delimiter = ',', value_name = "IP|IFACE")]
    pub addrs: Vec<String>,
    /// The UDP port devices listen on and reach peers at.
    #[arg(long, default_value_t = 4791)]
    pub port: u16,
    /// Drop each packet sent with this probability (to try loss recovery).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Seed of the drops.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Polling a completion queue drives the device (lowest latency, a core per poller).
    #[arg(long)]
    pub busy_poll: bool,
    /// A thread waiting for a completion drives the device, asleep in poll(2) on its socket
    /// between rounds (busy polling's sleeping counterpart).
    #[arg(long, conflicts_with = "busy_poll")]
    pub wait_drives: bool,
    /// Each device honours the PFC and PAUSE frames that reach its interface, and serializes
    /// at the interface's rate (needs CAP_NET_RAW).
    #[arg(long)]
    pub pause: bool,
    /// Each device tags its frames, on its own interface, with an 802.1Q tag whose PCP is the
    /// queue pair's priority — its GRH traffic class's DSCP ÷ 8 (needs CAP_NET_RAW; IPv4).
    #[arg(long)]
    pub vlan: bool,
    /// The tag's VLAN: 0 (the default) sends priority tags, which every host takes.
    #[arg(long, value_name = "VID", default_value_t = 0, requires = "vlan",
          value_parser = clap::value_parser!(u16).range(0..=4095))]
    pub vlan_id: u16,
    /// The shim to load (default: `libibverbs.so` beside the `irn` binary, as cargo builds
    /// it; or `IRN_IBVERBS_LIB`).
    #[arg(long, value_name = "FILE")]
    pub lib: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

/// Where the shim is: `--lib`, `IRN_IBVERBS_LIB`, or beside the running binary.
pub fn find_lib(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("IRN_IBVERBS_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locating the irn binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join("libibverbs.so"), dir.join("../libibverbs.so")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(Error::Usage(format!(
        "irn's libibverbs.so is not beside {} (build it: cargo build --release -p irn-ibverbs; \
         or name it with --lib or IRN_IBVERBS_LIB)",
        exe.display()
    )))
}

/// A directory of the user's own holding the sonames, linked to `lib`.
pub fn soname_dir(lib: &Path) -> Result<PathBuf> {
    let lib = lib
        .canonicalize()
        .with_context(|| format!("the shim {}", lib.display()))?;
    // The real user id: the directory's owner must be this user.
    let uid = rustix::process::getuid().as_raw();
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    // One directory per library path, so that two trees' shims never meet.
    let tag = lib
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    let dir = base.join(format!("irn-exec-{uid}-{tag:016x}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", dir.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::from(e)).context(format!("creating {}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).with_context(|| dir.display().to_string())?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(Error::Failed(format!(
            "{} is not a private directory of this user's: remove it",
            dir.display()
        )));
    }
    for name in SONAMES {
        let link = dir.join(name);
        if std::fs::read_link(&link).ok().as_deref() == Some(lib.as_path()) {
            continue;
        }
        // Made under another name and renamed over the old link: a program starting
        // meanwhile sees the old link or the new, never none.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&lib, &tmp)
            .with_context(|| format!("linking {}", tmp.display()))?;
        std::fs::rename(&tmp, &link).with_context(|| format!("placing {}", link.display()))?;
    }
    Ok(dir)
}

/// The environment `args` gives the program: the `IRN_IBV_*` variables and the loader path.
pub fn environment(args: &ExecArgs, dir: &Path) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = vec![
        ("IRN_IBV_MODE".into(), args.mode.clone().into()),
        ("IRN_IBV_PORT".into(), args.port.to_string().into()),
        ("IRN_IBV_LOSS".into(), args.loss.to_string().into()),
        ("IRN_IBV_SEED".into(), args.seed.to_string().into()),
        (
            "IRN_IBV_BUSY_POLL".into(),
            if args.busy_poll { "1" } else { "0" }.into(),
        ),
    ];
    if !args.addrs.is_empty() {
        env.push(("IRN_IBV_DEVICES".into(), args.addrs.join(",").into()));
    }
    if args.wait_drives {
        env.push(("IRN_IBV_WAIT_DRIVES".into(), "1".into()));
    }
    if args.pause {
        env.push(("IRN_IBV_PAUSE".into(), "1".into()));
    }
    if args.vlan {
        env.push(("IRN_IBV_VLAN".into(), args.vlan_id.to_string().into()));
    }
    let mut path = OsString::from(dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    env.push(("LD_LIBRARY_PATH".into(), path));
    env
}

/// Replaces this process with the program (returns only if it cannot start).
pub fn run(args: ExecArgs) -> Result<bool> {
    if !(0.0..1.0).contains(&args.loss) {
        return Err(Error::Usage(format!(
            "--loss {}: a probability in [0, 1)",
            args.loss
        )));
    }
    let lib = find_lib(args.lib.as_deref())?;
    let dir = soname_dir(&lib)?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::Usage("no program to run".into()))?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    // A device list left over from the caller's environment would override --addr's absence.
    if args.addrs.is_empty() {
        cmd.env_remove("IRN_IBV_DEVICES");
    }
    // So would a tag or pauses left over: the flags say all of it.
    cmd.env_remove("IRN_IBV_PAUSE")
        .env_remove("IRN_IBV_VLAN")
        .env_remove("IRN_IBV_WAIT_DRIVES");
    cmd.envs(environment(&args, &dir));
    let e = cmd.exec();
    Err(Error::Failed(format!(
        "starting {}: {e}",
        Path::new(program).display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        exec: ExecArgs,
    }

    #[test]
    fn flags_become_the_shims_environment() {
        let cli = Cli::try_parse_from([
            "irn",
            "--mode",
            "irn",
            "--addr",
            "127.0.0.2,10.0.0.1",
            "--loss",
            "0.01",
            "--",
            "ib_write_bw",
            "-x",
            "0",
        ])
        .expect("valid flags");
        assert_eq!(cli.exec.command, ["ib_write_bw", "-x", "0"]);
        let env = environment(&cli.exec, Path::new("/run/x"));
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("IRN_IBV_MODE").as_deref(), Some("irn"));
        assert_eq!(
            get("IRN_IBV_DEVICES").as_deref(),
            Some("127.0.0.2,10.0.0.1")
        );
        assert_eq!(get("IRN_IBV_LOSS").as_deref(), Some("0.01"));
        assert!(get("LD_LIBRARY_PATH").expect("set").starts_with("/run/x"));
        assert_eq!(
            (
                get("IRN_IBV_PAUSE"),
                get("IRN_IBV_VLAN"),
                get("IRN_IBV_WAIT_DRIVES")
            ),
            (None, None, None)
        );
        let tagged = Cli::try_parse_from(["irn", "--pause", "--vlan", "--wait-drives", "--", "x"])
            .expect("valid flags");
        let env = environment(&tagged.exec, Path::new("/run/x"));
        let has = |k: &str, v: &str| env.iter().any(|(n, x)| n == k && x == v);
        assert!(
            has("IRN_IBV_PAUSE", "1")
                && has("IRN_IBV_VLAN", "0")
                && has("IRN_IBV_WAIT_DRIVES", "1"),
            "{env:?}"
        );
        let vid = Cli::try_parse_from(["irn", "--vlan", "--vlan-id", "7", "--", "x"])
            .expect("valid flags");
        let env = environment(&vid.exec, Path::new("/run/x"));
        assert!(env.iter().any(|(n, x)| n == "IRN_IBV_VLAN" && x == "7"));
        assert!(Cli::try_parse_from(["irn", "--vlan", "--vlan-id", "4096", "--", "x"]).is_err());
        assert!(Cli::try_parse_from(["irn", "--vlan-id", "3", "--", "x"]).is_err());
        assert!(Cli::try_parse_from(["irn", "--busy-poll", "--wait-drives", "--", "x"]).is_err());
        assert!(Cli::try_parse_from(["irn", "--mode", "gbn", "--", "x"]).is_err());
        assert!(
            Cli::try_parse_from(["irn"]).is_err(),
            "a program is required"
        );
    }

    #[test]
    fn the_soname_directory_is_private_and_links_every_soname() {
        let lib = std::env::temp_dir().join(format!("irn-exec-test-{}.so", std::process::id()));
        std::fs::write(&lib, b"not a library").expect("write");
        let dir = soname_dir(&lib).expect("made");
        let again = soname_dir(&lib).expect("idempotent");
        assert_eq!(dir, again);
        let meta = std::fs::metadata(&dir).expect("exists");
        assert_eq!(meta.mode() & 0o777, 0o700);
        for name in SONAMES {
            assert_eq!(
                std::fs::read_link(dir.join(name)).expect("a link"),
                lib.canonicalize().expect("exists")
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&lib);
    }
}
