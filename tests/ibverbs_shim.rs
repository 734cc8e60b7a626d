//! Unmodified RDMA programs over irn's libibverbs (`irn exec`): Debian's own binaries of
//! rdma-core (`ibv_devinfo`, `ibv_rc_pingpong`, `ibv_ud_pingpong`, `rping`) and perftest
//! (`ib_write_bw` … `ib_atomic_lat`), two of them against each other on loopback — each end
//! its own device address — through loss in both recovery modes, and between two network
//! namespaces; plus a C program built here against rdma-core's `verbs.h` that checks what
//! verbs(7) promises of every operation (`tests/ibverbs/abi_check.c`). Every program runs as
//! an unprivileged user (`nobody`, when the test runs as root): no kernel module, device file
//! or capability is needed. Data is verified wherever the tool verifies it (`-c`, `-V`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod common;
use common::netns::Netns;
use common::{finish, precondition_missing, text};

/// The programs the tests run, and the Debian package of each.
const TOOLS: [(&str, &str); 6] = [
    ("ibv_devinfo", "ibverbs-utils"),
    ("ibv_rc_pingpong", "ibverbs-utils"),
    ("ibv_ud_pingpong", "ibverbs-utils"),
    ("rping", "rdmacm-utils"),
    ("ib_write_bw", "perftest"),
    ("cc", "gcc"),
];

/// The shim beside the `irn` binary under test, brought up to date (`cargo test` does not
/// build a library no test links; `scripts/test` builds it with the workspace, and a test run
/// alone builds it here).
fn shim() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let irn = Path::new(env!("CARGO_BIN_EXE_irn"));
    let lib = irn.with_file_name("libibverbs.so");
    BUILT.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", "irn-ibverbs"]);
        if irn.components().any(|p| p.as_os_str() == "release") {
            c.arg("--release");
        }
        let out = c.output().expect("cargo runs");
        assert!(out.status.success(), "building irn-ibverbs: {}", text(&out));
    });
    lib
}

/// Whether every tool is installed (else the precondition is reported: a failure in CI).
fn tools_present(test: &str) -> bool {
    let missing: Vec<&str> = TOOLS
        .iter()
        .filter(|(bin, _)| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {bin}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        shim();
        return true;
    }
    precondition_missing(
        test,
        &format!(
            "needs Debian's {} (scripts/install-test-deps)",
            missing.join(", ")
        ),
    );
    false
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().ok().map(|o| o.stdout) == Some(b"0\n".to_vec())
}

/// `irn exec FLAGS -- PROGRAM…` as an unprivileged user (`nobody` when the test is root),
/// optionally inside network namespace `ns`.
fn exec(ns: Option<&str>, flags: &[&str], program: &[&str]) -> Command {
    exec_as(ns, false, flags, program)
}

/// [`exec`], keeping root's privileges when `privileged` (a packet socket needs them).
fn exec_as(ns: Option<&str>, privileged: bool, flags: &[&str], program: &[&str]) -> Command {
    let mut argv: Vec<String> = Vec::new();
    if let Some(ns) = ns {
        argv.extend(["ip", "netns", "exec", ns].map(String::from));
    }
    if is_root() && !privileged {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(String::from),
        );
    }
    argv.push(env!("CARGO_BIN_EXE_irn").into());
    argv.push("exec".into());
    argv.extend(flags.iter().map(|s| s.to_string()));
    argv.push("--".into());
    argv.extend(program.iter().map(|s| s.to_string()));
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..])
        .env_remove("IRN_IBV_DEVICES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn spawn(mut c: Command) -> Child {
    c.spawn().expect("irn exec starts")
}

/// Runs a server, then its client once the server listens (a client that found nobody
/// listening is run again), and returns both outputs.
fn pair(server: Command, mut client: impl FnMut() -> Command, secs: u64) -> (Output, Output) {
    let mut s = spawn(server);
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..40 {
        let out = finish(spawn(client()), secs);
        let t = text(&out);
        let early = [
            "Couldn't connect",
            "Connection refused",
            "Unable to Connect",
        ]
        .iter()
        .any(|m| t.contains(m));
        if early && matches!(s.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(250));
            continue;
        }
        return (finish(s, secs), out);
    }
    let _ = s.kill();
    panic!(
        "the server never listened: {}",
        text(&s.wait_with_output().expect("output"))
    );
}

fn both_ok(what: &str, s: &Output, c: &Output) {
    assert!(s.status.success(), "{what}, server: {}", text(s));
    assert!(c.status.success(), "{what}, client: {}", text(c));
}

#[test]
fn ibv_devinfo_sees_irn_devices_with_roce_v2_gids() {
    if !tools_present("ibv_devinfo_sees_irn_devices_with_roce_v2_gids") {
        return;
    }
    let out = finish(
        spawn(exec(
            None,
            &["--addr", "127.0.41.1,127.0.41.2"],
            &["ibv_devinfo", "-v"],
        )),
        30,
    );
    assert!(out.status.success(), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    for want in [
        "hca_id:\tirn0",
        "hca_id:\tirn1",
        "PORT_ACTIVE",
        "link_layer:\t\tEthernet",
        "::ffff:127.0.41.1, RoCE v2",
        "::ffff:127.0.41.2, RoCE v2",
    ] {
        assert!(t.contains(want), "no {want:?} in:\n{t}");
    }
    // A configuration that means nothing is said, naming the variable, and leaves no
    // device. (`irn exec` sets IRN_IBV_DEVICES only from --addr: a shell below it sets it.)
    let out = exec(
        None,
        &[],
        &["sh", "-c", "IRN_IBV_DEVICES=nowhere ibv_devinfo"],
    )
    .output()
    .expect("runs");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("IRN_IBV_DEVICES=\"nowhere\""),
        "{}",
        text(&out)
    );
}

#[test]
fn the_abi_keeps_verbs_promises_in_both_modes_through_loss() {
    let test = "the_abi_keeps_verbs_promises_in_both_modes_through_loss";
    if !tools_present(test) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("irn-abi-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let exe = dir.join("abi_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ibverbs/abi_check.c");
    let cc = Command::new("cc")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cc runs");
    assert!(
        cc.status.success(),
        "compiling against rdma-core's verbs.h (libibverbs-dev, scripts/install-test-deps): {}",
        text(&cc)
    );
    // Readable and runnable by the unprivileged user.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let exe = exe.to_string_lossy().to_string();
    // The last two: devices whose waiting threads drive them (`--wait-drives`), through the
    // same promises — completion events, polls, waits — as the engine-driven ones.
    for (mode, loss, waits) in [
        ("roce", "0", false),
        ("irn", "0", false),
        ("irn", "0.05", false),
        ("roce", "0.05", false),
        ("irn", "0.05", true),
        ("roce", "0.05", true),
    ] {
        let mut flags = vec![
            "--mode",
            mode,
            "--loss",
            loss,
            "--port",
            "4811",
            "--addr",
            "127.0.42.1,127.0.42.2",
        ];
        if waits {
            flags.push("--wait-drives");
        }
        let out = finish(spawn(exec(None, &flags, &[&exe])), 60);
        assert!(
            out.status.success(),
            "{mode} at {loss} loss, waits driving: {waits}: {}",
            text(&out)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("abi-check: ok"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ibv_rc_pingpong -c` (every buffer checked) with completion events, and
/// `ibv_ud_pingpong -c`, through 2 % loss on the client, in both modes.
#[test]
fn pingpong_checks_every_buffer_through_loss() {
    if !tools_present("pingpong_checks_every_buffer_through_loss") {
        return;
    }
    for (i, mode) in ["irn", "roce"].into_iter().enumerate() {
        let udp = (4821 + i).to_string();
        let tcp = (18621 + i).to_string();
        let server = exec(
            None,
            &["--mode", mode, "--port", &udp, "--addr", "127.0.43.1"],
            &[
                "ibv_rc_pingpong",
                "-g",
                "0",
                "-n",
                "300",
                "-s",
                "8192",
                "-e",
                "-c",
                "-p",
                &tcp,
            ],
        );
        let client = || {
            exec(
                None,
                &[
                    "--mode",
                    mode,
                    "--loss",
                    "0.02",
                    "--port",
                    &udp,
                    "--addr",
                    "127.0.43.2",
                ],
                &[
                    "ibv_rc_pingpong",
                    "-g",
                    "0",
                    "-n",
                    "300",
                    "-s",
                    "8192",
                    "-e",
                    "-c",
                    "-p",
                    &tcp,
                    "127.0.43.1",
                ],
            )
        };
        let (s, c) = pair(server, client, 120);
        both_ok(&format!("ibv_rc_pingpong {mode}"), &s, &c);
        assert!(text(&c).contains("300 iters"), "{}", text(&c));
    }
    let server = exec(
        None,
        &["--port", "4823", "--addr", "127.0.43.1"],
        &[
            "ibv_ud_pingpong",
            "-g",
            "0",
            "-n",
            "200",
            "-c",
            "-p",
            "18623",
        ],
    );
    let client = || {
        exec(
            None,
            &["--port", "4823", "--addr", "127.0.43.2"],
            &[
                "ibv_ud_pingpong",
                "-g",
                "0",
                "-n",
                "200",
                "-c",
                "-p",
                "18623",
                "127.0.43.1",
            ],
        )
    };
    let (s, c) = pair(server, client, 60);
    both_ok("ibv_ud_pingpong", &s, &c);
}

/// Every perftest tool of the issue, over its own exchange and over the RDMA CM (`-R`), IRN
/// through 1 % loss.
#[test]
fn perftest_runs_every_operation_and_connects_through_the_rdma_cm() {
    if !tools_present("perftest_runs_every_operation_and_connects_through_the_rdma_cm") {
        return;
    }
    let tools = [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_atomic_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ];
    let mut runs: Vec<(&str, bool)> = tools.iter().map(|t| (*t, false)).collect();
    runs.extend([
        ("ib_write_bw", true),
        ("ib_send_lat", true),
        ("ib_read_bw", true),
    ]);
    for (k, (tool, cm)) in runs.into_iter().enumerate() {
        let udp = (4831 + k).to_string();
        let tcp = (18631 + k).to_string();
        let mut args = vec![tool, "-n", "300", "-p", &tcp];
        if cm {
            args.push("-R");
        } else {
            args.extend(["-x", "0"]);
        }
        let server = exec(
            None,
            &["--mode", "irn", "--port", &udp, "--addr", "127.0.44.1"],
            &args,
        );
        let client = || {
            let mut a = args.clone();
            a.push("127.0.44.1");
            exec(
                None,
                &[
                    "--mode",
                    "irn",
                    "--loss",
                    "0.01",
                    "--port",
                    &udp,
                    "--addr",
                    "127.0.44.2",
                ],
                &a,
            )
        };
        let (s, c) = pair(server, client, 120);
        both_ok(&format!("{tool} (rdma_cm: {cm})"), &s, &c);
        assert!(
            text(&c).contains("#bytes"),
            "{tool}: no results: {}",
            text(&c)
        );
    }
}

/// rping: RDMA CM connection, Send, RDMA Read and Write every iteration, each ping's data
/// verified (`-V`), then the client's disconnect reaching the server.
#[test]
fn rping_verifies_every_ping() {
    if !tools_present("rping_verifies_every_ping") {
        return;
    }
    for (i, mode) in ["roce", "irn"].into_iter().enumerate() {
        let udp = (4851 + i).to_string();
        let cm_port = (7471 + i).to_string();
        let server = exec(
            None,
            &["--mode", mode, "--port", &udp, "--addr", "127.0.45.1"],
            &[
                "rping",
                "-s",
                "-a",
                "127.0.45.1",
                "-p",
                &cm_port,
                "-C",
                "50",
                "-V",
            ],
        );
        let client = || {
            exec(
                None,
                &[
                    "--mode",
                    mode,
                    "--loss",
                    "0.01",
                    "--port",
                    &udp,
                    "--addr",
                    "127.0.45.2",
                ],
                &[
                    "rping",
                    "-c",
                    "-a",
                    "127.0.45.1",
                    "-p",
                    &cm_port,
                    "-C",
                    "50",
                    "-V",
                ],
            )
        };
        let (s, c) = pair(server, client, 120);
        both_ok(&format!("rping {mode}"), &s, &c);
        // The server runs until the client's disconnect reaches it (the client may exit
        // before its own DISCONNECTED event is printed).
        assert!(text(&s).contains("server DISCONNECT EVENT"), "{}", text(&s));
    }
}

/// Two hosts as far as the kernel is concerned: rping, `ibv_rc_pingpong -c` and
/// `ib_write_bw` between network namespaces over a veth pair, IRN through 1 % loss.
#[test]
fn unmodified_programs_across_network_namespaces() {
    let test = "unmodified_programs_across_network_namespaces";
    if !tools_present(test) {
        return;
    }
    let Some(n) = Netns::setup(test, "ib", 234) else {
        return;
    };
    let flags = |addr: &'static str, loss: &'static str| {
        vec!["--mode", "irn", "--loss", loss, "--addr", addr]
    };
    let (s, c) = pair(
        exec(
            Some(&n.b),
            &flags("10.234.0.2", "0"),
            &["rping", "-s", "-a", "10.234.0.2", "-C", "30", "-V"],
        ),
        || {
            exec(
                Some(&n.a),
                &flags("10.234.0.1", "0.01"),
                &["rping", "-c", "-a", "10.234.0.2", "-C", "30", "-V"],
            )
        },
        120,
    );
    both_ok("rping across namespaces", &s, &c);
    let (s, c) = pair(
        exec(
            Some(&n.b),
            &flags("10.234.0.2", "0.01"),
            &[
                "ibv_rc_pingpong",
                "-g",
                "0",
                "-n",
                "200",
                "-s",
                "16384",
                "-c",
            ],
        ),
        || {
            exec(
                Some(&n.a),
                &flags("10.234.0.1", "0.01"),
                &[
                    "ibv_rc_pingpong",
                    "-g",
                    "0",
                    "-n",
                    "200",
                    "-s",
                    "16384",
                    "-c",
                    "10.234.0.2",
                ],
            )
        },
        120,
    );
    both_ok("ibv_rc_pingpong across namespaces", &s, &c);
    let (s, c) = pair(
        exec(
            Some(&n.b),
            &flags("10.234.0.2", "0"),
            &["ib_write_bw", "-x", "0", "-n", "500"],
        ),
        || {
            exec(
                Some(&n.a),
                &flags("10.234.0.1", "0.01"),
                &["ib_write_bw", "-x", "0", "-n", "500", "10.234.0.2"],
            )
        },
        120,
    );
    both_ok("ib_write_bw across namespaces", &s, &c);
    // RoCEv2 over IPv6: devices on IPv6 addresses, whose GIDs are those addresses; the tool's
    // own exchange still runs over IPv4.
    for (ns, dev, addr) in [
        (&n.a, &n.dev_a, "fd00:234::1/64"),
        (&n.b, &n.dev_b, "fd00:234::2/64"),
    ] {
        common::netns::ip(&["-n", ns, "addr", "add", addr, "dev", dev, "nodad"])
            .expect("an IPv6 address");
    }
    let (s, c) = pair(
        exec(
            Some(&n.b),
            &["--mode", "irn", "--addr", "fd00:234::2"],
            &[
                "ibv_rc_pingpong",
                "-g",
                "0",
                "-n",
                "100",
                "-s",
                "8192",
                "-c",
            ],
        ),
        || {
            exec(
                Some(&n.a),
                &["--mode", "irn", "--loss", "0.01", "--addr", "fd00:234::1"],
                &[
                    "ibv_rc_pingpong",
                    "-g",
                    "0",
                    "-n",
                    "100",
                    "-s",
                    "8192",
                    "-c",
                    "10.234.0.2",
                ],
            )
        },
        120,
    );
    both_ok("ibv_rc_pingpong over IPv6 GIDs", &s, &c);
    assert!(text(&c).contains("GID fd00:234::1"), "{}", text(&c));
}

/// Perftest's `--tclass` is the GRH traffic class of `ibv_qp_attr.ah_attr`: through the shim
/// with `irn exec --vlan 0` (as root: a packet socket), `ib_write_bw --tclass 104` between two
/// namespaces sends its Writes in 802.1Q frames whose PCP is that class's priority (DSCP 26:
/// 3), as a capture on the receiver's link shows, and they arrive.
#[test]
fn a_traffic_class_is_the_pcp_of_the_tagged_frames() {
    let test = "a_traffic_class_is_the_pcp_of_the_tagged_frames";
    if !tools_present(test) {
        return;
    }
    if Command::new("tcpdump").arg("--version").output().is_err() {
        precondition_missing(test, "needs tcpdump");
        return;
    }
    let Some(n) = Netns::setup(test, "it", 243) else {
        return;
    };
    let dump = Command::new("ip")
        .args([
            "netns", "exec", &n.b, "tcpdump", "-i", &n.dev_b, "-n", "-e", "-c", "40",
        ])
        .args(["vlan", "and", "udp", "port", "4791"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump");
    std::thread::sleep(Duration::from_millis(500));
    let flags = |addr: &'static str| vec!["--mode", "irn", "--vlan", "--addr", addr];
    let perf = |server: Option<&'static str>| {
        let mut a = vec!["ib_write_bw", "-x", "0", "-n", "300", "--tclass", "104"];
        a.extend(server);
        a
    };
    let (s, c) = pair(
        exec_as(Some(&n.b), true, &flags("10.243.0.2"), &perf(None)),
        || {
            exec_as(
                Some(&n.a),
                true,
                &flags("10.243.0.1"),
                &perf(Some("10.243.0.2")),
            )
        },
        120,
    );
    both_ok("ib_write_bw --tclass 104, tagged", &s, &c);
    let dump = finish(dump, 20);
    let shown = String::from_utf8_lossy(&dump.stdout).to_string();
    let frames: Vec<&str> = shown.lines().filter(|l| l.contains("802.1Q")).collect();
    assert!(frames.len() >= 20, "tcpdump: {}", text(&dump));
    assert!(
        frames.iter().all(|l| l.contains("vlan 0, p 3,")),
        "every RoCEv2 frame tagged with PCP 3: {shown}"
    );
}
