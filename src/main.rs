//! `irn`: the command-line front end of irn.
//!
//! Subcommands:
//! * `irn decode FILE.pcap [--json] [--strict]` — decode RoCEv2, PFC/PAUSE and DRP traffic in a
//!   capture, checking every ICRC.
//! * `irn sim [FILE.toml] [--seed N] [--json OUT] [--csv DIR] [--set KEY=VALUE]… [--plot OUT.svg]`
//!   — run a simulation experiment (with no file: the built-in E1–E3 comparison).
//! * `irn reproduce [--quick] [--seeds N] [--only E1,…] [--jobs J] [--out DIR]` — the whole
//!   evaluation, with a report of every claim.
//! * `irn perf write|read|send|atomic [HOST]` — perftest-style bandwidth and latency over UDP.
//! * `irn pingpong [HOST]` — `ibv_rc_pingpong` over UDP.
//! * `irn rping -s|-c -a ADDR` — rdma-core's `rping` over the RDMA CM, over UDP.
//! * `irn pingmesh --hosts FILE` — RDMA Pingmesh (seed 001 §5.3) over UDP.
//! * `irn drp --iface IF [PEER_MAC]` — Dynamic RDMA (seed 003) over raw Ethernet.
//! * `irn exec [--mode irn] [--addr IP] -- PROGRAM ARGS…` — an unmodified RDMA program
//!   (`ibv_rc_pingpong`, perftest, rping, an application) over irn's libibverbs.
//! * `irn switch --port IF --port IF…` — a user-space Ethernet switch with ECN-marking egress
//!   queues at a set rate: a congested port for trying congestion control on real hosts.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use irn_tools::decode;

mod drp_sim;
mod nic_state_cmd;
mod reproduce_cmd;
mod sim_cmd;
mod switch_cmd;

#[derive(Parser)]
#[command(name = "irn", version, about = "IRN: RDMA over lossy Ethernet", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode a pcap/pcapng capture: one line per RoCEv2, PFC, PAUSE or DRP frame, with every
    /// header field, payload length and ICRC verdict; other frames are counted and skipped.
    Decode {
        /// The capture (pcap or pcapng; Ethernet, raw IP or Linux cooked link types).
        file: PathBuf,
        /// One JSON object per packet, then a summary object (`"kind": "summary"`).
        #[arg(long)]
        json: bool,
        /// Exit with status 1 if any packet is malformed or has a bad ICRC.
        #[arg(long)]
        strict: bool,
        /// Decode UDP datagrams to this destination port as RoCEv2 too (4791 always is), as a
        /// protocol analyser's "decode as": e.g. the port an irn device fell back to when
        /// another held 4791 on its address (`irn perf` says which). Repeatable.
        #[arg(long = "udp-port", value_name = "PORT")]
        udp_ports: Vec<u16>,
    },
    /// Run a datacenter simulation experiment. With no file: IRN, IRN+PFC, RoCE+PFC and RoCE on
    /// the IRN paper's default fat-tree (about a minute), printing average slowdown, average
    /// and 99th-percentile FCT with ratios to RoCE+PFC. Exit status 0 only if every flow of
    /// every run completed intact.
    Sim(sim_cmd::SimArgs),
    /// Reproduce the whole evaluation (experiments/evaluation.toml): every experiment over
    /// its seeds with one progress bar, resumable, then each experiment's JSON and figures
    /// and a report of every claim (DIR/report/REPORT.md and report.html). `--quick` checks
    /// every claim's direction at reduced scale. Exit status 0 only if every claim judged has
    /// the verdict the evaluation records.
    Reproduce(reproduce_cmd::ReproduceArgs),
    /// Put the slices of a sharded experiment (`irn sim FILE --shard I/N --json …`) back
    /// together: the JSON the whole experiment writes, its table, and optionally its plot.
    Merge(sim_cmd::MergeArgs),
    /// perftest over irn: `irn perf write|read|send|atomic` is a server; with a HOST, the
    /// client, which prints perftest's bandwidth (or, with --latency, latency) columns. Exit
    /// status 0 only if every operation succeeded (and, with --verify, the data checked).
    Perf(irn_tools::perf::PerfArgs),
    /// `ibv_rc_pingpong` over irn: same flags (-p -s -n -g -m -r), exchange and output.
    Pingpong(irn_tools::pingpong::PingpongArgs),
    /// rdma-core's `rping` over irn, connected through the RDMA CM (REQ / REP / RTU over QP1):
    /// `-s` server or `-c` client, `-a ADDR`, `-p PORT`, `-C COUNT`, `-S SIZE`, `-v`, `-V`.
    Rping(irn_tools::rping::RpingArgs),
    /// RDMA Pingmesh (seed 001 §5.3): every host of a list probes every other with 512-byte
    /// RDMA Writes and serves their probes; JSON lines per probe and a summary that points at
    /// the hosts at fault (`--summarize` merges every agent's lines).
    Pingmesh(irn_tools::pingmesh::PingmeshArgs),
    /// Dynamic RDMA (seed 003) over raw Ethernet, EtherType 0x01FF: `irn drp --iface IF` is the
    /// responder; with a PEER_MAC, the initiator, which prints each transfer's time and the
    /// average. Exit status 0 only if every byte arrived intact (each write is read back).
    Drp(irn_tools::drp::DrpArgs),
    /// The per-queue-pair NIC state each loss-recovery design adds to RoCE (SPEC E13), from
    /// irn-transport's own structures at the BDP of each link rate, next to an mlx5 QP
    /// context's 1 856 bits.
    NicState(nic_state_cmd::NicStateArgs),
    /// Run an unmodified RDMA program over irn: its libibverbs and librdmacm are irn's
    /// (no kernel module, no device file, no root), devices `irn0`, … on the given addresses.
    /// `irn exec --addr 127.0.0.2 -- ib_write_bw -x 0 127.0.0.1`.
    Exec(irn_tools::exec::ExecArgs),
    /// An output-queued Ethernet switch in user space between two or more interfaces: every
    /// egress drains at --rate from a --buffer of bytes and marks ECN-capable packets CE as the
    /// simulator's switches do (RED or a threshold), so congestion control meets a real
    /// bottleneck where the kernel has no marking qdisc. Writes its counters as JSON at exit.
    Switch(switch_cmd::SwitchArgs),
}

/// A tool's outcome as the exit status.
fn tool(result: irn_tools::Result<bool>) -> anyhow::Result<ExitCode> {
    Ok(exit_code(result?))
}

fn exit_code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode {
            file,
            json,
            strict,
            udp_ports,
        } => {
            let stdout = io::stdout();
            let mut out = io::BufWriter::new(stdout.lock());
            let format = if json {
                decode::Format::Json
            } else {
                decode::Format::Text
            };
            match decode::run(&file, format, &udp_ports, &mut out).and_then(|summary| {
                out.flush()?;
                Ok(summary)
            }) {
                Ok(summary) if strict && !summary.clean() => Ok(ExitCode::from(1)),
                Ok(_) => Ok(ExitCode::SUCCESS),
                // `irn decode … | head` closes the pipe early; that is not an error.
                Err(e)
                    if e.io()
                        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
                {
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::Perf(args) => tool(irn_tools::perf::run(args)),
        Command::Pingmesh(args) => tool(irn_tools::pingmesh::run(args)),
        Command::Pingpong(args) => tool(irn_tools::pingpong::run(args)),
        Command::Rping(args) => tool(irn_tools::rping::run(args)),
        Command::Sim(args) => sim_cmd::run(args).map(exit_code),
        Command::Reproduce(args) => reproduce_cmd::run(args).map(exit_code),
        Command::Merge(args) => sim_cmd::merge(args).map(exit_code),
        Command::Drp(args) => tool(irn_tools::drp::run(args)),
        Command::NicState(args) => nic_state_cmd::run(args).map(exit_code),
        Command::Switch(args) => switch_cmd::run(args).map(exit_code),
        Command::Exec(args) => tool(irn_tools::exec::run(args)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("irn: {e:#}");
            ExitCode::from(2)
        }
    }
}
