//! The server process's own CPU time, memory, threads and open files, read
//! from `/proc/self` (Linux) when `/metrics` is scraped, under the names
//! Prometheus' client libraries use (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, …) so existing dashboards and alerts
//! work unchanged. Nothing is sampled in between: a scrape reads the
//! kernel's counters directly. Elsewhere (no `/proc`) the figures are absent.

/// What `/proc/self` says about this process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    pub resident_memory_bytes: u64,
    pub virtual_memory_bytes: u64,
    pub threads: u64,
    pub open_fds: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Reads this process's figures; `None` where `/proc/self` cannot be read.
pub fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot_time_s = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| boot_time_seconds(&s));
    let mut stats = parse_stat(&stat, clock_ticks_per_second(), page_bytes(), boot_time_s)?;
    stats.open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    Some(stats)
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

fn page_bytes() -> u64 {
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page as u64 } else { 4096 }
}

/// `btime` of `/proc/stat`: the boot time, seconds since the epoch.
fn boot_time_seconds(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Parses `/proc/self/stat` (proc(5)): the fields after the command name,
/// which is in parentheses and may itself hold spaces and parentheses.
fn parse_stat(
    stat: &str,
    ticks_per_second: u64,
    page_bytes: u64,
    boot_time_s: Option<u64>,
) -> Option<ProcessStats> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first here; proc(5) numbers fields from 1.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let ticks = ticks_per_second as f64;
    let cpu_seconds = (field(14)? + field(15)?) as f64 / ticks;
    let threads = field(20)?;
    let start_ticks = field(22)?;
    let start_time_seconds = boot_time_s.map_or(0.0, |b| b as f64 + start_ticks as f64 / ticks);
    let virtual_memory_bytes = field(23)?;
    let resident_memory_bytes = field(24)? * page_bytes;
    Some(ProcessStats {
        cpu_seconds,
        resident_memory_bytes,
        virtual_memory_bytes,
        threads,
        open_fds: 0,
        start_time_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_holds_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime cutime cstime priority nice threads
        // itrealvalue starttime vsize rss …
        let line = "4242 (rondo (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 \
                    17 0 12345 987654321 2048 18446744073709551615 0 0 0 0";
        let s = parse_stat(line, 100, 4096, Some(1_700_000_000)).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.threads, 17);
        assert_eq!(s.virtual_memory_bytes, 987_654_321);
        assert_eq!(s.resident_memory_bytes, 2048 * 4096);
        assert_eq!(s.start_time_seconds, 1_700_000_000.0 + 123.45);
        assert_eq!(parse_stat("garbage", 100, 4096, None), None);
    }

    #[test]
    fn this_process_has_memory_cpu_and_threads() {
        let Some(s) = read() else {
            return; // no /proc here
        };
        assert!(s.resident_memory_bytes > 1 << 20, "{s:?}");
        assert!(s.virtual_memory_bytes >= s.resident_memory_bytes, "{s:?}");
        assert!(s.threads >= 1 && s.open_fds >= 3, "{s:?}");
        assert!(s.start_time_seconds > 1_500_000_000.0, "{s:?}");
        // Burn some CPU and see it counted.
        let before = s.cpu_seconds;
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = read().unwrap().cpu_seconds;
        assert!(after > before, "{before} -> {after}");
    }
}
