//! The scheduling class of the thread that watches a busy-polled device (a device whose
//! waiting threads drive it has a watcher too, under its normal policy: no thread spins there).
//!
//! A busy-polling thread does the device's work itself ([`super::DeviceConfig::busy_poll`]),
//! and something must still look, every [`super::engine::POLLER_WATCH`], whether the poller has
//! stopped: to send what it left behind and to hand the device back to the engine. A look
//! wakes a thread; a woken `SCHED_OTHER` thread preempts the one running on its core, and on a
//! host whose cores all spin (both ends of a busy-polled test on two cores) that is a poller,
//! which loses its core for two context switches at every look — the tail of a busy-polled
//! round trip. So the looks belong to a thread of their own ([`super::engine::watcher`]) under
//! `SCHED_IDLE` (sched(7)): its wake-ups never preempt, and it runs on a core that is free —
//! as soon as a poller stops, or on a host with a core to spare. It only reads atomics and
//! wakes the engine, which keeps its own policy and does the work.
//!
//! The engine itself does not take `SCHED_IDLE`: an unprivileged thread cannot leave it.
//! `SCHED_BATCH` for the engine while it watches (wake-ups that do not preempt, a normal share
//! of the CPU) cuts the round trip's tail as much, but busy-polled 64-byte Sends run at
//! 0.96–1.24 Mpps with it against 1.41–1.63 without (docs/BENCHMARKS.md).

#![allow(unsafe_code)]

use std::io;

/// Lowers the calling thread to `SCHED_IDLE`, for good (an unprivileged thread cannot come
/// back). A thread already under a policy other than `SCHED_OTHER` — real-time, or batch — is
/// left as it is: `Ok(false)`. `Ok(true)` if it is now idle-class.
pub(super) fn lower_to_idle() -> io::Result<bool> {
    match policy()? {
        libc::SCHED_IDLE => Ok(true),
        libc::SCHED_OTHER => set_policy(libc::SCHED_IDLE).map(|()| true),
        _ => Ok(false),
    }
}

/// The calling thread's scheduling policy (`sched_getscheduler(0)`).
fn policy() -> io::Result<libc::c_int> {
    // SAFETY: no pointers; pid 0 is the calling thread.
    let p = unsafe { libc::sched_getscheduler(0) };
    if p < 0 {
        Err(io::Error::last_os_error())
    } else {
        // Without the flag a child might carry (`SCHED_RESET_ON_FORK`).
        Ok(p & !libc::SCHED_RESET_ON_FORK)
    }
}

/// Sets the calling thread's policy to a non-real-time one (priority 0, as those take);
/// sched_setscheduler(2) keeps the nice value.
fn set_policy(policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` for the call's duration; pid 0 is the calling
    // thread.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Every thread of this process, its name and its scheduling policy, read from `/proc` (field
/// 41 of each thread's `stat`): for tests that look at the device's threads from outside.
#[cfg(test)]
pub(super) fn threads() -> Vec<(String, libc::c_int)> {
    let mut out = vec![];
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("a task").path();
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // Fields after the name, which is in parentheses and may hold spaces: the state is
        // field 3, the policy field 41.
        let rest = &stat[stat.rfind(')').expect("stat's name") + 2..];
        let policy = rest.split(' ').nth(41 - 3).expect("field 41");
        out.push((
            name.trim_end().to_string(),
            policy.parse().expect("a policy"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a fresh thread (a test must not change the policy of the harness's
    /// thread), returning what it returns.
    fn on_a_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("the test thread")
    }

    #[test]
    fn a_normal_thread_is_lowered_to_idle_and_keeps_its_nice_value() {
        let (want, got) = on_a_thread(|| {
            let nice = || {
                // SAFETY: no pointers. `setpriority(PRIO_PROCESS, 0)` and `getpriority` act on
                // the calling thread on Linux; nice values here are never -1.
                unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
            };
            // Raising one's own nice value needs no privilege.
            let want = (nice() + 3).min(19);
            // SAFETY: no pointers.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, want) };
            assert_eq!(rc, 0, "{}", io::Error::last_os_error());
            let before = policy().expect("policy");
            let lowered = lower_to_idle().expect("SCHED_IDLE refused");
            let again = lower_to_idle().expect("a second call");
            (
                want,
                (before, lowered, again, policy().expect("policy"), nice()),
            )
        });
        assert_eq!(got, (libc::SCHED_OTHER, true, true, libc::SCHED_IDLE, want));
    }

    #[test]
    fn a_thread_under_another_policy_is_left_alone() {
        let got = on_a_thread(|| {
            set_policy(libc::SCHED_BATCH).expect("SCHED_BATCH");
            (lower_to_idle().expect("lower"), policy().expect("policy"))
        });
        assert_eq!(got, (false, libc::SCHED_BATCH));
    }

    /// The threads of this process named `name`, with their policies.
    fn named(name: &str) -> Vec<libc::c_int> {
        threads()
            .into_iter()
            .filter(|(n, _)| n == name)
            .map(|(_, p)| p)
            .collect()
    }

    fn device(busy_poll: bool) -> crate::Device {
        let mut cfg = crate::DeviceConfig::new("127.0.0.1".parse().expect("address"));
        cfg.port = 0;
        cfg.receive = crate::ReceivePath::Udp;
        cfg.busy_poll = busy_poll;
        crate::Device::open(cfg).expect("open a device")
    }

    /// A device whose waiting threads drive it has a watcher too, under the policy it started
    /// with: no thread spins on such a device, and an idle-class watcher would hand the device
    /// back late to a program whose threads fill the cores.
    #[test]
    fn a_wait_driven_devices_watcher_keeps_its_policy() {
        let mut cfg = crate::DeviceConfig::new("127.0.0.1".parse().expect("address"));
        cfg.port = 0;
        cfg.receive = crate::ReceivePath::Udp;
        cfg.wait_drives = true;
        let dev = crate::Device::open(cfg).expect("open a device");
        let name = format!("irn-watch {}", dev.local_addr().port());
        // Named as it first runs; then long enough for a watcher that lowered itself to have
        // done so.
        let start = std::time::Instant::now();
        while named(&name).is_empty() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "no {name}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: no pointers; the policy this test's thread, the watcher's spawner, has.
        let mine = unsafe { libc::sched_getscheduler(0) } & !libc::SCHED_RESET_ON_FORK;
        assert_eq!(named(&name), [mine]);
    }

    /// A busy-polled device has a watcher thread, which lowers itself to `SCHED_IDLE` and ends
    /// with the device; a device whose program's threads do not drive it has none.
    #[test]
    fn a_busy_polled_device_has_an_idle_class_watcher_until_it_closes() {
        let plain = device(false);
        assert_eq!(
            named(&format!("irn-watch {}", plain.local_addr().port())),
            [],
            "a device its program does not drive started a watcher"
        );
        let dev = device(true);
        let name = format!("irn-watch {}", dev.local_addr().port());
        let start = std::time::Instant::now();
        while named(&name) != [libc::SCHED_IDLE] {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{name}: {:?}",
                named(&name)
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Joined with the device; its task may linger in /proc a moment after the join.
        drop(dev);
        let start = std::time::Instant::now();
        while !named(&name).is_empty() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "the watcher outlived its device"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn threads_reads_each_threads_name_and_policy() {
        let found = std::thread::Builder::new()
            .name("irn-sched-test".into())
            .spawn(|| {
                let before = threads();
                lower_to_idle().expect("lower");
                (before, threads())
            })
            .expect("spawn")
            .join()
            .expect("the test thread");
        let mine = |list: &[(String, libc::c_int)]| {
            list.iter()
                .filter(|(n, _)| n == "irn-sched-test")
                .map(|&(_, p)| p)
                .collect::<Vec<_>>()
        };
        assert_eq!(mine(&found.0), [libc::SCHED_OTHER], "{:?}", found.0);
        assert_eq!(mine(&found.1), [libc::SCHED_IDLE], "{:?}", found.1);
    }
}
