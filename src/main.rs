//! `irn`: the command-line front end of irn.
//!
//! Subcommands:
//! * `irn decode FILE.pcap [--json] [--strict]` — decode RoCEv2, PFC/PAUSE and DRP traffic in a
//!   capture, checking every ICRC.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;

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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode { file, json, strict } => {
            let stdout = io::stdout();
            let mut out = io::BufWriter::new(stdout.lock());
            let format = if json {
                decode::Format::Json
            } else {
                decode::Format::Text
            };
            decode::run(&file, format, &mut out)
                .and_then(|summary| {
                    out.flush()?;
                    Ok(summary)
                })
                .map(|summary| {
                    if strict && !summary.clean() {
                        ExitCode::from(1)
                    } else {
                        ExitCode::SUCCESS
                    }
                })
        }
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("irn: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `irn decode … | head` closes the pipe early; that is not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
