#!/usr/bin/env bash
# rxe-guests.sh — irn's copy of the team's Soft-RoCE harness (../shared/interop/run-rxe-pair.sh),
# adapted for scripts/interop-rxe: its own namespace and subnet by default (so it can run beside
# the shared one), apt retried once (apt's archive cache was seen to vanish mid-install), and
# a cache check so that a second run skips the downloads.
#
# Boots two tiny QEMU guests running the Linux kernel's Soft-RoCE
# (rdma_rxe) on a private bridge inside a host network namespace, run rdma-core /
# perftest traffic between them (and a host-side userspace RC peer against one of
# them), and capture the RoCEv2 (UDP 4791) packets.
#
# Everything lives under $WORK (default ${TMPDIR:-/tmp}/irn-rxe). Needs root, /dev/net/tun and
# Debian bookworm apt. Uses KVM only where real VMX/SVM KVM exists; on hosts where
# /dev/kvm is kvm_pvm (which cannot boot a stock kernel) it runs TCG.
#
# Usage:
#   ./run-rxe-pair.sh            # = all: setup build net boot test down
#   ./run-rxe-pair.sh setup      # apt-get install host packages, fetch+extract kernel/qemu
#   ./run-rxe-pair.sh build      # build the guest initramfs
#   ./run-rxe-pair.sh net        # create netns + bridge + taps
#   ./run-rxe-pair.sh boot       # boot both guests, wait until rxe0 is up
#   ./run-rxe-pair.sh test       # ibv_rc_pingpong, ib_{send,write,read}_bw, rping + pcaps
#   ./run-rxe-pair.sh down       # power guests off, delete netns
#   ./run-rxe-pair.sh gexec g1 'cmd'   # run a shell command in guest g1 (after boot)
#   ./run-rxe-pair.sh hostpeer   # net + boot only g1, leave it up for a host-side peer
#   ./run-rxe-pair.sh tools      # (re)write tools/icrc_check.py, tools/hostpeer_rc_pingpong.py
#
# Env: WORK (${TMPDIR:-/tmp}/irn-rxe) NS (irnrxe) SUBNET (10.98.0) GUEST_MEM (768) GIDX (1)
#      ACCEL (qemu accel args; default: TCG here, see kvm_args) BW_FULL=1 (extra big run)
#
# Network (only inside the namespace $NS that this script creates):
#   br0 10.98.0.1/24 (host side, in netns)   g1 = 10.98.0.11   g2 = 10.98.0.12
set -euo pipefail

WORK=${WORK:-${TMPDIR:-/tmp}/irn-rxe}
NS=${NS:-irnrxe}
SUBNET=${SUBNET:-10.98.0}
HOST_IP=$SUBNET.1
G1_IP=$SUBNET.11
G2_IP=$SUBNET.12
GUEST_MEM=${GUEST_MEM:-768}
KPKG_META=${KPKG_META:-linux-image-amd64}
QEMU_VER=${QEMU_VER:-}          # empty = bookworm candidate
CAP=$WORK/captures
RUN=$WORK/run
LOG=$WORK/logs
QEMU=$WORK/qemu/usr/bin/qemu-system-x86_64
QSHARE=$WORK/qemu/usr/share/qemu
# TCG accelerator is a loadable module (accel-tcg-x86_64.so, from qemu-system-common)
export QEMU_MODULE_DIR=$WORK/qemu/usr/lib/x86_64-linux-gnu/qemu

ts() { date +%s.%N; }
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }
elapsed() { awk -v a="$1" -v b="$(ts)" 'BEGIN{printf "%.1f", b-a}'; }

# --------------------------------------------------------------------------- tools
# Two small Python helpers are embedded here so this file is self-contained;
# they are written to $WORK/tools/ by "setup" (and on demand).
write_tools() {
    mkdir -p "$WORK/tools"
    cat >"$WORK/tools/icrc_check.py" <<'PYEOF'
#!/usr/bin/env python3
"""Verify the RoCEv2 ICRC of every UDP/4791 packet in a classic pcap file.

Pure standard library, no tshark needed. Prints one line per packet with -v.
Exit status 0 iff every RoCEv2 packet's ICRC matches.

ICRC (IBA spec A17.3.3 / Linux drivers/infiniband/sw/rxe/rxe_icrc.c), IPv4 case:
    crc32 (the ordinary IEEE CRC-32 that zlib.crc32 computes: reflected,
    poly 0x04C11DB7, init 0xFFFFFFFF, final xor 0xFFFFFFFF) over
      8 bytes 0xFF                       (stands for the masked LRH of IB)
    + IPv4 header with TOS=0xFF, TTL=0xFF, header checksum=0xFFFF
    + UDP header with checksum=0xFFFF
    + BTH with byte 4 (resv8a) = 0xFF
    + the rest of the IB packet (extended headers, payload, pad) excluding the ICRC
    The 4-byte result is appended in LITTLE-endian byte order
    (so Wireshark's "Invariant CRC: 0x..." shows the byte-swapped value).
IPv6: IPv6 header with traffic class=0xFF, flow label=0xFFFFF, hop limit=0xFF.
"""
import struct
import sys
import zlib

ROCE_PORT = 4791


def icrc(ip_hdr: bytes, udp_hdr: bytes, ib: bytes) -> int:
    ip = bytearray(ip_hdr)
    if ip[0] >> 4 == 4:
        ip[1] = 0xFF  # TOS (DSCP+ECN)
        ip[8] = 0xFF  # TTL
        ip[10:12] = b"\xff\xff"  # header checksum
    else:
        ip[0:4] = bytes([ip[0] | 0x0F, 0xFF, 0xFF, 0xFF])  # tclass + flow label
        ip[7] = 0xFF  # hop limit
    udp = bytearray(udp_hdr)
    udp[6:8] = b"\xff\xff"
    bth = bytearray(ib[:12])
    bth[4] = 0xFF
    data = b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + ib[12:]
    return zlib.crc32(data) & 0xFFFFFFFF


def packets(path):
    with open(path, "rb") as f:
        hdr = f.read(24)
        magic = struct.unpack("<I", hdr[:4])[0]
        if magic in (0xA1B2C3D4, 0xA1B23C4D):
            e = "<"
        elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
            e = ">"
        else:
            raise SystemExit(f"{path}: not a classic pcap (pcapng? use editcap -F pcap)")
        linktype = struct.unpack(e + "I", hdr[20:24])[0]
        if linktype != 1:
            raise SystemExit(f"{path}: linktype {linktype}, expected Ethernet")
        n = 0
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            _, _, incl, _ = struct.unpack(e + "IIII", rec)
            n += 1
            yield n, f.read(incl)


def main():
    verbose = "-v" in sys.argv
    paths = [a for a in sys.argv[1:] if a != "-v"]
    ok = bad = 0
    for path in paths:
        for n, fr in packets(path):
            eth_type = struct.unpack(">H", fr[12:14])[0]
            off = 14
            if eth_type == 0x8100:
                eth_type = struct.unpack(">H", fr[16:18])[0]
                off = 18
            if eth_type == 0x0800:
                ihl = (fr[off] & 0x0F) * 4
                if fr[off + 9] != 17:
                    continue
                ip_hdr = fr[off:off + ihl]
                total = struct.unpack(">H", fr[off + 2:off + 4])[0]
                l4 = off + ihl
                end = off + total
            elif eth_type == 0x86DD:
                if fr[off + 6] != 17:
                    continue
                ip_hdr = fr[off:off + 40]
                l4 = off + 40
                end = l4 + struct.unpack(">H", fr[off + 4:off + 6])[0]
            else:
                continue
            udp_hdr = fr[l4:l4 + 8]
            if struct.unpack(">H", udp_hdr[2:4])[0] != ROCE_PORT:
                continue
            ib = fr[l4 + 8:end]
            want = struct.unpack("<I", ib[-4:])[0]
            got = icrc(ip_hdr, udp_hdr, ib[:-4])
            opcode = ib[0]
            if got == want:
                ok += 1
            else:
                bad += 1
            if verbose or got != want:
                print(f"{path}#{n}: opcode {opcode:3d} len {len(ib):5d} icrc wire(le)=0x{want:08x} "
                      f"computed=0x{got:08x} {'OK' if got == want else 'MISMATCH'}")
    print(f"ICRC: {ok} ok, {bad} mismatched")
    return 0 if bad == 0 and ok > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
PYEOF
    cat >"$WORK/tools/hostpeer_rc_pingpong.py" <<'PYEOF'
#!/usr/bin/env python3
"""Minimal host-side RoCEv2 RC peer that talks to a real `ibv_rc_pingpong` server
(Linux rdma_rxe in a guest) over a plain UDP socket on port 4791.

It plays the CLIENT role of ibv_rc_pingpong:
  1. TCP connect to <server>:18515, send "LLLL:QQQQQQ:PPPPPP:<32 hex GID>\\0" (52 bytes),
     read the server's 52-byte reply, send "done\\0" (5 bytes)        [rc_pingpong.c]
  2. for i in range(iters): send RC SEND ONLY (opcode 4, AckReq) of <size> bytes,
     wait for the server's ACK of it and for the server's own SEND ONLY, ACK that.
Run inside the namespace that owns <local ip>, e.g.
  ip netns exec rxehost python3 hostpeer_rc_pingpong.py 10.99.0.1 10.99.0.11 -n 10 -s 64
and start the guest side first:  ibv_rc_pingpong -d rxe0 -g 1 -n 10 -s 64

This is a throw-away feasibility probe for the future Rust implementation, not a
RoCE stack: no retransmission, no NAK handling, one outstanding message.
"""
import argparse
import random
import socket
import struct
import sys
import time
import zlib

ROCE_PORT = 4791
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2

OP_SEND_ONLY = 4
OP_ACK = 17


def icrc_ipv4(src, dst, sport, dport, ib_wo_icrc, ip_id=0):
    """ICRC for an IPv4 RoCEv2 packet whose IP header the kernel will build.

    With an UNCONNECTED UDP socket and DF set (IP_PMTUDISC_DO) Linux puts
    IP ID = 0 (ip_select_ident_segs), so the pseudo header is fully predictable.
    TOS, TTL and the IP header checksum are masked to all-ones; so is the UDP
    checksum; BTH byte 4 (resv8a) is masked to 0xff.
    """
    total = 20 + 8 + len(ib_wo_icrc) + 4
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0xFF, total, ip_id, 0x4000, 0xFF, 17, 0xFFFF,
                     socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack(">HHHH", sport, dport, 8 + len(ib_wo_icrc) + 4, 0xFFFF)
    bth = bytearray(ib_wo_icrc[:12])
    bth[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + ip + udp + bytes(bth) + ib_wo_icrc[12:]) & 0xFFFFFFFF
    return struct.pack("<I", crc)


def bth(opcode, dqpn, psn, ack_req=False, se=False, pad=0, pkey=0xFFFF):
    b0 = (0x80 if se else 0) | ((pad & 3) << 4)  # SE, MigReq=0, PadCnt, TVer=0
    return struct.pack(">BBHI I", opcode, b0, pkey, dqpn & 0xFFFFFF,
                       ((0x80000000 if ack_req else 0) | (psn & 0xFFFFFF)))


def aeth(syndrome, msn):
    return struct.pack(">I", (syndrome << 24) | (msn & 0xFFFFFF))


def gid_v4mapped(ip):
    return b"\x00" * 10 + b"\xff\xff" + socket.inet_aton(ip)


def exchange(server, my_qpn, my_psn, my_gid, port=18515):
    msg = "%04x:%06x:%06x:%s" % (0, my_qpn, my_psn, my_gid.hex())
    msg = msg.encode() + b"\x00"
    assert len(msg) == 52
    for _ in range(100):
        try:
            s = socket.create_connection((server, port), timeout=5)
            break
        except OSError:
            time.sleep(0.2)
    else:
        raise SystemExit("cannot connect to %s:%d" % (server, port))
    s.sendall(msg)
    rep = b""
    while len(rep) < 52:
        chunk = s.recv(52 - len(rep))
        if not chunk:
            raise SystemExit("server closed during exchange")
        rep += chunk
    s.sendall(b"done\x00")
    s.close()
    lid, qpn, psn, gid = rep.rstrip(b"\x00").decode().split(":")
    return int(qpn, 16), int(psn, 16), bytes.fromhex(gid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("local_ip")
    ap.add_argument("server_ip")
    ap.add_argument("-n", "--iters", type=int, default=10)
    ap.add_argument("-s", "--size", type=int, default=64)
    ap.add_argument("-p", "--port", type=int, default=18515)
    a = ap.parse_args()

    my_qpn = random.randint(0x100, 0xFFFFFF)
    my_psn = random.randint(0, 0xFFFFFF)
    rqpn, rpsn, rgid = exchange(a.server_ip, my_qpn, my_psn, gid_v4mapped(a.local_ip), a.port)
    print(f"local  QPN 0x{my_qpn:06x} PSN 0x{my_psn:06x} GID ::ffff:{a.local_ip}")
    print(f"remote QPN 0x{rqpn:06x} PSN 0x{rpsn:06x} GID {socket.inet_ntop(socket.AF_INET6, rgid)}")

    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)  # DF -> IP ID 0
    u.bind((a.local_ip, ROCE_PORT))
    u.settimeout(5)
    dst = (a.server_ip, ROCE_PORT)

    def send_ib(ib):
        u.sendto(ib + icrc_ipv4(a.local_ip, a.server_ip, ROCE_PORT, ROCE_PORT, ib), dst)

    payload = b"\x7b" * a.size
    pad = (-len(payload)) & 3
    sq_psn, rq_psn, msn = my_psn, rpsn, 0
    t0 = time.time()
    for i in range(a.iters):
        send_ib(bth(OP_SEND_ONLY, rqpn, sq_psn, ack_req=True, pad=pad) + payload + b"\0" * pad)
        got_ack = got_send = False
        while not (got_ack and got_send):
            pkt, src = u.recvfrom(65535)
            op, _, _, dq, apsn = struct.unpack(">BBHII", pkt[:12])
            psn = apsn & 0xFFFFFF
            if (dq & 0xFFFFFF) != my_qpn:
                print(f"  ignoring packet for QPN 0x{dq & 0xFFFFFF:06x}")
                continue
            if op == OP_ACK:
                syn, amsn = pkt[12], int.from_bytes(pkt[13:16], "big")
                if syn >> 5 != 0:
                    raise SystemExit(f"NAK/RNR syndrome 0x{syn:02x} psn 0x{psn:06x}")
                if psn == sq_psn:
                    got_ack = True
            elif op == OP_SEND_ONLY:
                if psn != rq_psn:
                    print(f"  unexpected psn 0x{psn:06x} (want 0x{rq_psn:06x}), re-ACKing")
                else:
                    rq_psn = (rq_psn + 1) & 0xFFFFFF
                    msn = (msn + 1) & 0xFFFFFF
                    got_send = True
                # ACK: syndrome 0x1f (ACK, credit field "invalid"/unlimited), PSN = acked PSN
                send_ib(bth(OP_ACK, rqpn, (rq_psn - 1) & 0xFFFFFF) + aeth(0x1F, msn))
            else:
                print(f"  opcode {op} ignored")
        sq_psn = (sq_psn + 1) & 0xFFFFFF
    dt = time.time() - t0
    print(f"{a.iters} iters of {a.size} bytes with the guest's rxe in {dt:.2f}s: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
PYEOF
    chmod +x "$WORK/tools/"*.py
}

# --------------------------------------------------------------------------- setup
do_setup() {
    local t0; t0=$(ts)
    [ "$(id -u)" = 0 ] || die "must run as root"
    mkdir -p "$WORK/debs" "$CAP" "$RUN" "$LOG"
    log "apt-get update"
    apt-get update -qq >"$LOG/apt-update.log" 2>&1 || die "apt-get update failed"
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    log "apt-get install host packages"
    # qemu-system-x86 itself is NOT installed: on this machine image qemu-utils comes
    # from bookworm-backports (10.x) and Breaks qemu-system-common (< 8.0). We install
    # only qemu's runtime libraries + firmware and dpkg -x the qemu binary instead.
    local try
    for try in 1 2; do
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libaio1 libbpf1 libcapstone4 libfdt1 libfuse3-3 libglib2.0-0 libgnutls30 \
        libibverbs1 libjpeg62-turbo libnuma1 libpixman-1-0 libpmem1 libpng16-16 \
        librdmacm1 libsasl2-2 libseccomp2 libslirp0 liburing2 libvdeplug2 libzstd1 \
        seabios ipxe-qemu busybox-static cpio zstd kmod iproute2 tcpdump tshark \
        ibverbs-utils ibverbs-providers perftest rdmacm-utils \
        >"$LOG/apt-install.log" 2>&1 && break
    [ "$try" = 2 ] && { tail -20 "$LOG/apt-install.log"; die "apt-get install failed"; }
    log "apt-get install failed; once more"
    done

    cd "$WORK/debs"
    local kpkg qv
    kpkg=$(apt-cache depends "$KPKG_META" | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    [ -n "$kpkg" ] || die "cannot resolve $KPKG_META"
    qv=${QEMU_VER:-$(apt-cache policy qemu-system-x86 | awk '/Candidate:/{print $2}')}
    # qemu-system-data is arch:all and not always rebuilt with binNMUs (+bN suffix)
    local qdv; qdv=$(apt-cache policy qemu-system-data | awk '/Candidate:/{print $2}')
    rm -f ./*.deb
    log "apt-get download $kpkg qemu-system-x86=$qv qemu-system-data=$qdv"
    apt-get download "$kpkg" "qemu-system-x86=$qv" "qemu-system-data=$qdv" "qemu-system-common=$qv" \
        >"$LOG/apt-download.log" 2>&1 || { cat "$LOG/apt-download.log"; die "apt-get download failed"; }

    rm -rf "$WORK/qemu" "$WORK/kernel"
    mkdir -p "$WORK/qemu" "$WORK/kernel"
    for d in qemu-system-x86_*.deb qemu-system-data_*.deb qemu-system-common_*.deb; do dpkg -x "$d" "$WORK/qemu"; done
    for f in /usr/share/seabios/*.bin /usr/lib/ipxe/qemu/*.rom; do ln -sf "$f" "$QSHARE/"; done
    dpkg -x linux-image-*.deb "$WORK/kernel"
    local kv; kv=$(ls "$WORK/kernel/lib/modules")
    depmod -b "$WORK/kernel" "$kv"
    "$QEMU" --version | head -1 >"$WORK/versions.txt"
    echo "kernel $kpkg $(dpkg-deb -f linux-image-*.deb Version)" >>"$WORK/versions.txt"
    dpkg-query -W -f '${Package} ${Version}\n' ibverbs-utils ibverbs-providers libibverbs1 \
        librdmacm1 perftest rdmacm-utils iproute2 busybox-static tshark seabios >>"$WORK/versions.txt"
    cat "$WORK/versions.txt" >&2
    write_tools
    log "setup done in $(elapsed "$t0")s"
}

# --------------------------------------------------------------------------- build
GUEST_BINS="/usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong
 /usr/bin/ibv_uc_pingpong /usr/bin/ibv_ud_pingpong /usr/bin/ibv_srq_pingpong
 /usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_send_bw /usr/bin/ib_atomic_bw
 /usr/bin/ib_write_lat /usr/bin/ib_read_lat /usr/bin/ib_send_lat /usr/bin/ib_atomic_lat
 /usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/rdma_server /usr/bin/rdma_client
 /usr/bin/rdma /usr/sbin/ip"
GUEST_MODS="virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs rdma_ucm 9pnet_virtio 9p"

copy_with_libs() { # $1 = staging root, rest = ELF files
    local root=$1; shift
    local f lib
    for f in "$@"; do
        install -D -m 0755 "$(readlink -f "$f")" "$root/usr${f#/usr}"
        for lib in $(ldd "$f" | awk '/=> \//{print $3} $1 ~ /^\/lib64\//{print $1}'); do
            # merged-/usr: /lib/x86_64-linux-gnu == /usr/lib/x86_64-linux-gnu
            local dst=$root/usr${lib#/usr}
            [ -e "$dst" ] || install -D -m 0755 "$(readlink -f "$lib")" "$dst"
        done
        if ldd "$f" | grep -q 'not found'; then ldd "$f" >&2; die "missing libs for $f"; fi
    done
}

do_build() {
    local t0; t0=$(ts)
    local kv; kv=$(ls "$WORK/kernel/lib/modules")
    local R=$WORK/initramfs
    rm -rf "$R"; mkdir -p "$R"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,proc,sys,dev,tmp,job,etc,root,var/run}
    ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"
    cp /bin/busybox "$R/usr/bin/busybox"
    ldd "$R/usr/bin/busybox" >/dev/null 2>&1 && die "need busybox-static (/bin/busybox is dynamic)"
    # userland: rdma-core + perftest + iproute2, with their shared libraries
    copy_with_libs "$R" $GUEST_BINS
    copy_with_libs "$R" /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
    # dlopen()ed by glibc for pthread_exit/cancel (rping aborts without it)
    copy_with_libs "$R" /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
    # stdbuf, so that a tool's output reaches its log line by line: a tool that hangs and is
    # given up on has printed what it got to, rather than nothing from a full stdio buffer
    copy_with_libs "$R" /usr/bin/stdbuf /usr/libexec/coreutils/libstdbuf.so
    mkdir -p "$R/etc/libibverbs.d"; cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
    # kernel modules (only what we need, with deps) + modules.dep for busybox modprobe
    local m f
    for m in $GUEST_MODS; do
        modprobe -d "$WORK/kernel" -S "$kv" --show-depends "$m" | awk '$1=="insmod"{print $2}'
    done | sort -u | while read -r f; do
        install -D -m 0644 "$f" "$R/usr/lib/modules/$kv/${f#"$WORK"/kernel/lib/modules/"$kv"/}"
    done
    depmod -b "$R/usr" "$kv" 2>/dev/null || depmod -b "$R" "$kv"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
    printf 'root:x:0:\n' >"$R/etc/group"
    printf '127.0.0.1 localhost\n' >"$R/etc/hosts"
    cat >"$R/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s 2>/dev/null
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmp /tmp
for a in $(cat /proc/cmdline); do case $a in rxe.*=*) k=${a%%=*}; k=${k#rxe.}; eval "RXE_$k=${a#*=}";; esac; done
hostname "${RXE_name:-guest}"
echo "INIT: $(cut -d' ' -f1 /proc/uptime)s modules"
for m in virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs rdma_ucm 9pnet_virtio 9p; do modprobe $m || echo "INIT: modprobe $m failed"; done
ip link set lo up
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
ip addr add "${RXE_ip:?}" dev eth0
ip link set eth0 up
rdma link add rxe0 type rxe netdev eth0 && echo "INIT: rxe0 added at $(cut -d" " -f1 /proc/uptime)s" || echo "INIT: rdma link add FAILED"
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=262144 job /job || echo "INIT: 9p mount failed"
mkdir -p /job/cmd /job/out
# wait for the port to become ACTIVE and the IPv4 GID to appear
i=0; while [ $i -lt 100 ]; do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && \
  cat /sys/class/infiniband/rxe0/ports/1/gids/[0-3] 2>/dev/null | grep -q ffff && break; sleep 0.1; i=$((i+1)); done
{ echo "uptime $(cut -d' ' -f1 /proc/uptime)"; uname -r; /usr/sbin/ip -br addr; rdma link
  for n in 0 1 2 3; do p=/sys/class/infiniband/rxe0/ports/1; v=$(cat $p/gids/$n)
    [ "$v" = 0000:0000:0000:0000:0000:0000:0000:0000 ] || echo "GID[$n] $v $(cat $p/gid_attrs/types/$n) $(cat $p/gid_attrs/ndevs/$n)"; done
} > /job/ready.tmp 2>&1; mv /job/ready.tmp /job/ready
echo "INIT: ready at $(cut -d' ' -f1 /proc/uptime)s"
# file-based command agent: host drops /job/cmd/NAME.sh, we run it in the
# background, output -> /job/out/NAME.log, exit status -> /job/out/NAME.rc
while :; do
  for f in /job/cmd/*.sh; do
    [ -e "$f" ] || continue
    b=${f##*/}; b=${b%.sh}
    mv "$f" "/tmp/$b.sh" || continue
    if [ "$b" = poweroff ]; then sync; echo "INIT: poweroff"; poweroff -f; fi
    ( sh "/tmp/$b.sh" > "/job/out/$b.log" 2>&1; echo $? > "/job/out/$b.rc.tmp"; mv "/job/out/$b.rc.tmp" "/job/out/$b.rc" ) &
  done
  sleep 0.1
done
EOF
    chmod 0755 "$R/init"
    (cd "$R" && find . -print0 | cpio --null -o -H newc --quiet | zstd -q -T0 -3 >"$WORK/initramfs.cpio.zst")
    cp "$WORK/kernel/boot/vmlinuz-$kv" "$WORK/vmlinuz"
    log "initramfs $(du -h "$WORK/initramfs.cpio.zst" | cut -f1) (unpacked $(du -sh "$R" | cut -f1)), built in $(elapsed "$t0")s"
}

# --------------------------------------------------------------------------- net
do_net() {
    ip netns del "$NS" 2>/dev/null || true
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" link add br0 type bridge stp_state 0 forward_delay 0
    ip -n "$NS" addr add "$HOST_IP/24" dev br0
    ip -n "$NS" link set br0 up
    local t
    for t in tap1 tap2; do
        ip -n "$NS" tuntap add dev "$t" mode tap
        ip -n "$NS" link set "$t" master br0
        ip -n "$NS" link set "$t" up
    done
    log "netns $NS: br0 $HOST_IP/24 with tap1, tap2"
}

# --------------------------------------------------------------------------- boot
kvm_args() {
    # Override with ACCEL="..." (e.g. ACCEL="-enable-kvm -cpu host").
    if [ -n "${ACCEL:-}" ]; then echo "$ACCEL"; return; fi
    # On some hosts /dev/kvm exists but is provided by kvm_pvm ("Pagetable-based
    # Virtual Machine", kernel cmdline nested_pvm=1) — no VMX/SVM in /proc/cpuinfo.
    # PVM only runs PVM-enabled guest kernels; a stock Debian kernel hangs right after
    # the real-mode setup ("Probing EDD ... ok", then nothing). So: TCG unless a real
    # hardware KVM (kvm_intel / kvm_amd) is loaded.
    if [ -z "${NO_KVM:-}" ] && [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] && \
       { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
        local c
        for c in host host,-arch-capabilities; do
            local rc=0
            timeout 2 "$QEMU" -L "$QSHARE" -enable-kvm -cpu "$c" -M pc -m 64 -nodefaults \
                -display none -S -monitor none >/dev/null 2>&1 || rc=$?
            [ "$rc" = 124 ] && { echo "-enable-kvm -cpu $c"; return; }
        done
    fi
    echo "-accel tcg -cpu max"
}

boot_guest() { # name ip tap mac
    local name=$1 ip=$2 tap=$3 mac=$4
    local d=$RUN/$name
    rm -rf "$d"; mkdir -p "$d/cmd" "$d/out"
    # shellcheck disable=SC2046
    ip netns exec "$NS" "$QEMU" -L "$QSHARE" $ACCEL -M pc -smp 1 -m "$GUEST_MEM" \
        -nodefaults -display none -no-reboot -monitor none \
        -serial "file:$LOG/$name.console.log" \
        -kernel "$WORK/vmlinuz" -initrd "$WORK/initramfs.cpio.zst" \
        -append "console=ttyS0 panic=-1 quiet loglevel=4 rxe.name=$name rxe.ip=$ip/24" \
        -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=" \
        -fsdev "local,id=fs0,path=$d,security_model=none" \
        -device "virtio-9p-pci,fsdev=fs0,mount_tag=job" \
        -pidfile "$RUN/$name.pid" -daemonize
}

wait_ready() { # name timeout
    local i=0
    while [ ! -e "$RUN/$1/ready" ]; do
        sleep 0.2; i=$((i+1))
        [ $i -lt $(( $2 * 5 )) ] || { tail -30 "$LOG/$1.console.log" >&2; die "$1 not ready after $2 s"; }
    done
}

do_boot() {
    local names=${1:-"g1 g2"}
    mkdir -p "$RUN" "$LOG" "$CAP"
    ACCEL=$(kvm_args); export ACCEL
    log "accelerator: $ACCEL"
    local t0; t0=$(ts)
    for n in $names; do
        case $n in
            g1) boot_guest g1 "$G1_IP" tap1 52:54:00:99:00:11 ;;
            g2) boot_guest g2 "$G2_IP" tap2 52:54:00:99:00:12 ;;
        esac
    done
    for n in $names; do wait_ready "$n" 120; done
    local bt; bt=$(elapsed "$t0")
    log "guests [$names] ready in ${bt}s (qemu start -> rxe0 ACTIVE)"
    echo "$bt" >"$RUN/boot_seconds"
    for n in $names; do echo "--- $n"; cat "$RUN/$n/ready"; done >&2
}

# --------------------------------------------------------------------------- guest exec
SEQ=0
gspawn() { # guest name cmd...  -> starts cmd in guest (background)
    local g=$1 name=$2; shift 2
    rm -f "$RUN/$g/out/$name".{log,rc}
    printf '%s\n' "$*" >"$RUN/$g/cmd/.$name.tmp"
    mv "$RUN/$g/cmd/.$name.tmp" "$RUN/$g/cmd/$name.sh"
}
gwait() { # guest name timeout -> prints log, returns rc
    local g=$1 name=$2 to=${3:-60} i=0
    while [ ! -e "$RUN/$g/out/$name.rc" ]; do
        sleep 0.1; i=$((i+1))
        [ $i -lt $((to * 10)) ] || { log "timeout waiting for $g:$name"; cat "$RUN/$g/out/$name.log" 2>/dev/null; return 124; }
    done
    cat "$RUN/$g/out/$name.log"
    return "$(cat "$RUN/$g/out/$name.rc")"
}
gexec() { # guest cmd... (synchronous)
    local g=$1; shift
    SEQ=$((SEQ+1)); local name=x$$_$SEQ
    gspawn "$g" "$name" "$@"
    gwait "$g" "$name" "${GEXEC_TIMEOUT:-120}"
}

# --------------------------------------------------------------------------- capture
CAP_PID=
cap_start() { # name
    rm -f "$CAP/$1.pcap"
    ip netns exec "$NS" tcpdump -Z root -i tap1 --immediate-mode -U -s 9100 -B 32768 -w "$CAP/$1.pcap" "udp port 4791 or tcp port 18515" >"$LOG/tcpdump-$1.log" 2>&1 &
    CAP_PID=$!
    # wait until tcpdump listens
    local i=0; while ! grep -qs listening "$LOG/tcpdump-$1.log" && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
}
cap_stop() { sleep 0.5; kill "$CAP_PID" 2>/dev/null || true; wait "$CAP_PID" 2>/dev/null || true; CAP_PID=; }

summarize() { # pcap -> opcode histogram
    tshark -r "$1" -T fields -e infiniband.bth.opcode -Y infiniband 2>/dev/null | sort | uniq -c | sort -rn |
        awk 'BEGIN{split("0:RC_SEND_FIRST 1:RC_SEND_MIDDLE 2:RC_SEND_LAST 3:RC_SEND_LAST_IMM 4:RC_SEND_ONLY 5:RC_SEND_ONLY_IMM 6:RC_WRITE_FIRST 7:RC_WRITE_MIDDLE 8:RC_WRITE_LAST 9:RC_WRITE_LAST_IMM 10:RC_WRITE_ONLY 11:RC_WRITE_ONLY_IMM 12:RC_READ_REQ 13:RC_READ_RESP_FIRST 14:RC_READ_RESP_MIDDLE 15:RC_READ_RESP_LAST 16:RC_READ_RESP_ONLY 17:RC_ACK 18:RC_ATOMIC_ACK 19:RC_CMP_SWAP 20:RC_FETCH_ADD 100:UD_SEND_ONLY 101:UD_SEND_ONLY_IMM",t," "); for(i in t){split(t[i],kv,":"); nm[kv[1]]=kv[2]}} {printf "    %6d  opcode %3d %s\n",$1,$2,nm[$2]}'
}

# --------------------------------------------------------------------------- test
PASS=0; FAIL=0
check() { # desc rc
    if [ "$2" = 0 ]; then PASS=$((PASS+1)); log "PASS: $1"; else FAIL=$((FAIL+1)); log "FAIL: $1 (rc=$2)"; fi
}

pair_test() { # name server_cmd client_cmd(with PEER) timeout
    local name=$1 scmd=$2 ccmd=$3 to=${4:-120} t0 rc=0
    t0=$(ts)
    cap_start "$name"
    gspawn g1 "$name-srv" "$scmd"
    sleep "${SERVER_SETTLE:-1}"
    local rcc=0 rcs=0
    gspawn g2 "$name-cli" "$ccmd"
    gwait g2 "$name-cli" "$to" >"$LOG/$name-client.log" 2>&1 || rcc=$?
    gwait g1 "$name-srv" 30 >"$LOG/$name-server.log" 2>&1 || rcs=$?
    cap_stop
    rc=$(( rcc != 0 ? rcc : rcs ))
    local n; n=$(tshark -r "$CAP/$name.pcap" -Y infiniband 2>/dev/null | wc -l)
    grep -q '^0 packets dropped by kernel' "$LOG/tcpdump-$name.log" || log "WARN: tcpdump dropped packets: $(grep dropped "$LOG/tcpdump-$name.log")"
    log "$name: client rc=$rcc server rc=$rcs, ${n} RoCEv2 packets captured, $(elapsed "$t0")s"
    summarize "$CAP/$name.pcap" >&2
    [ "$n" -gt 0 ] || rc=99
    check "$name" "$rc"
}

dump_exchange() { # pcap -> text transcript of the TCP out-of-band exchange (NUL shown as \0)
    tshark -r "$1" -Y 'tcp.len>0' -T fields -e frame.number -e ip.src -e tcp.srcport -e ip.dst \
        -e tcp.dstport -e tcp.len -e tcp.payload 2>/dev/null |
    while read -r fn src sp dst dp len hex; do
        printf '#%-4s %s:%s -> %s:%s len=%-4s ' "$fn" "$src" "$sp" "$dst" "$dp" "$len"
        python3 -c 'import sys; b=bytes.fromhex(sys.argv[1]); print(repr(b)[2:-1] if all(c in range(32,127) or c==0 for c in b) else "hex:"+b.hex())' "$hex"
    done
}

host_peer_test() {
    local t0 rc=0 rcs=0; t0=$(ts)
    [ -f "$WORK/tools/hostpeer_rc_pingpong.py" ] || write_tools
    cap_start hostpeer_rc_pingpong
    gspawn g1 hostpeer-srv "ibv_rc_pingpong -d rxe0 -g ${GIDX:-1} -n 10 -s 64"
    sleep "${SERVER_SETTLE:-1}"
    timeout 60 ip netns exec "$NS" python3 "$WORK/tools/hostpeer_rc_pingpong.py" \
        "$HOST_IP" "$G1_IP" -n 10 -s 64 >"$LOG/hostpeer-client.log" 2>&1 || rc=$?
    gwait g1 hostpeer-srv 30 >"$LOG/hostpeer-server.log" 2>&1 || rcs=$?
    cap_stop
    cat "$LOG/hostpeer-client.log" >&2
    log "hostpeer_rc_pingpong: host rc=$rc guest server rc=$rcs, $(elapsed "$t0")s"
    summarize "$CAP/hostpeer_rc_pingpong.pcap" >&2
    python3 "$WORK/tools/icrc_check.py" "$CAP/hostpeer_rc_pingpong.pcap" >&2 || rc=98
    check "host userspace RC peer <-> guest ibv_rc_pingpong" "$(( rc != 0 ? rc : rcs ))"
}

do_test() {
    local t0; t0=$(ts)
    local GIDX=${GIDX:-1}
    log "ping g1 -> g2 (ARP warm-up)"
    gexec g1 "ping -c 2 -W 2 $G2_IP" >/dev/null || die "guests cannot reach each other"
    # 1. ibv_rc_pingpong: RC SEND/RECV, small, few iterations (TCP 18515 exchange)
    pair_test rc_pingpong \
        "ibv_rc_pingpong -d rxe0 -g $GIDX -n 10 -s 64" \
        "ibv_rc_pingpong -d rxe0 -g $GIDX -n 10 -s 64 $G1_IP" 60
    # 2. multi-packet sends (MTU 1024 -> FIRST/MIDDLE/LAST)
    pair_test rc_pingpong_4k \
        "ibv_rc_pingpong -d rxe0 -g $GIDX -n 5 -s 4096 -m 1024" \
        "ibv_rc_pingpong -d rxe0 -g $GIDX -n 5 -s 4096 -m 1024 $G1_IP" 60
    # 2b. UD (datagram) send: UD SEND ONLY with DETH (Q_Key), via a GRH/AH
    pair_test ud_pingpong \
        "ibv_ud_pingpong -d rxe0 -g $GIDX -n 5 -s 512" \
        "ibv_ud_pingpong -d rxe0 -g $GIDX -n 5 -s 512 $G1_IP" 60
    # 3. perftest (out-of-band exchange over TCP 18515, perftest's own format)
    local PT="-d rxe0 -x $GIDX -F --report_gbits"
    pair_test send_bw  "ib_send_bw  $PT -n 20 -s 2048" "ib_send_bw  $PT -n 20 -s 2048 $G1_IP" 120
    pair_test write_bw "ib_write_bw $PT -n 20 -s 4096" "ib_write_bw $PT -n 20 -s 4096 $G1_IP" 120
    pair_test read_bw  "ib_read_bw  $PT -n 20 -s 4096" "ib_read_bw  $PT -n 20 -s 4096 $G1_IP" 120
    pair_test atomic_bw "ib_atomic_bw $PT -n 20" "ib_atomic_bw $PT -n 20 $G1_IP" 120
    # 4. RDMA CM (rping): IB CM MADs REQ/REP/RTU/DREQ/DREP go as UD SEND_ONLY to QP1, then RC traffic
    pair_test rping "rping -s -a $G1_IP -C 3 -S 100 -v" "rping -c -a $G1_IP -C 3 -S 100 -v" 60
    # 5. a bandwidth run with default perftest sizes (bigger, no capture)
    if [ -n "${BW_FULL:-}" ]; then
        gspawn g1 bwfull "ib_write_bw $PT"; sleep 1
        gexec g2 "ib_write_bw $PT $G1_IP" | tee "$LOG/write_bw_full.log" >&2 || true
        gwait g1 bwfull 30 >/dev/null || true
    fi
    # one merged golden capture (mergecap -a: concatenate in this order)
    mergecap -F pcap -a -w "$CAP/rxe-golden.pcap" "$CAP"/rc_pingpong.pcap "$CAP"/rc_pingpong_4k.pcap \
        "$CAP"/ud_pingpong.pcap "$CAP"/send_bw.pcap "$CAP"/write_bw.pcap "$CAP"/read_bw.pcap \
        "$CAP"/atomic_bw.pcap "$CAP"/rping.pcap 2>/dev/null || true
    dump_exchange "$CAP/rc_pingpong.pcap" >"$CAP/exchange-rc_pingpong.txt"
    dump_exchange "$CAP/write_bw.pcap" >"$CAP/exchange-perftest-write_bw.txt"
    [ -f "$WORK/tools/icrc_check.py" ] || write_tools
    local rc=0
    python3 "$WORK/tools/icrc_check.py" "$CAP/rxe-golden.pcap" >&2 || rc=$?
    check "ICRC recomputed for every packet of rxe-golden.pcap" "$rc"
    # 6. host-side userspace peer (plain UDP socket in the netns) vs the guest's rxe
    host_peer_test
    log "tests: $PASS passed, $FAIL failed, $(elapsed "$t0")s"
    echo "$PASS passed, $FAIL failed"
    [ "$FAIL" = 0 ]
}

# --------------------------------------------------------------------------- down
do_down() {
    local n
    for n in g1 g2; do
        [ -d "$RUN/$n/cmd" ] && [ -e "$RUN/$n.pid" ] || continue
        : >"$RUN/$n/cmd/poweroff.sh"
    done
    local i=0
    for n in g1 g2; do
        [ -e "$RUN/$n.pid" ] || continue
        local p; p=$(cat "$RUN/$n.pid")
        i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
        kill "$p" 2>/dev/null && log "$n killed" || true
        rm -f "$RUN/$n.pid"
    done
    ip netns del "$NS" 2>/dev/null || true
    log "down"
}

# --------------------------------------------------------------------------- main
# Sourced (by scripts/interop-rxe) for its functions only.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
cmd=${1:-all}
case $cmd in
    setup) do_setup ;;
    build) do_build ;;
    net) do_net ;;
    boot) do_boot "${2:-g1 g2}" ;;
    test) do_test ;;
    down) do_down ;;
    gexec) shift; gexec "$@" ;;
    tools) write_tools; ls "$WORK/tools" ;;
    hostpeer) do_net; do_boot g1; log "g1 up at $G1_IP; host side: ip netns exec $NS <prog> (br0 $HOST_IP)" ;;
    all)
        T0=$(ts)
        do_setup
        do_build
        trap do_down EXIT
        do_net
        do_boot "g1 g2"
        rc=0; do_test || rc=$?
        do_down; trap - EXIT
        log "TOTAL wall time $(elapsed "$T0")s"
        exit $rc ;;
    *) sed -n 2,28p "$0"; exit 2 ;;
esac
fi
