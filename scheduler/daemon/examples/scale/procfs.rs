//! What the harness reads of a process from `/proc`: CPU time (the whole process or its
//! threads of one name), a `status` field, and the resident set's peak sampled as it runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The number after `field` in `/proc/PID/FILE` (e.g. `VmRSS:` in `status`, in KiB).
pub fn proc_field(pid: u32, file: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The process's CPU time (user + system), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// The CPU time of the process's threads named `name` (the daemon's `forecast`), in seconds.
pub fn thread_cpu_seconds(pid: u32, name: &str) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    (tasks.flatten())
        .filter(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            comm.trim() == name
        })
        .map(|t| stat_cpu_seconds(&t.path().join("stat").to_string_lossy()))
        // Not `sum()`: an empty f64 sum is -0.0, printed "-0.00" when no such thread runs.
        .fold(0.0, |total, s| total + s)
}

/// User plus system time from a `/proc` `stat` file, in seconds.
fn stat_cpu_seconds(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command (which may hold spaces) and its closing parenthesis.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    (ticks(11) + ticks(12)) / 100.0
}

/// The daemon's resident memory sampled every 100 ms from `/proc`: the highest seen, in KiB.
pub struct RssSampler {
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssSampler {
    pub fn start(pid: u32) -> RssSampler {
        let (peak_kib, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (peak, done) = (peak_kib.clone(), stop.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kib) = proc_field(pid, "status", "VmRSS:") {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        RssSampler { peak_kib, stop }
    }

    pub fn peak_mib(&self) -> f64 {
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
