//! What the host can allocate, asked before a large allocation (Note [Allocation checks]
//! in `module/alloc.rs`).
//!
//! # Note [Host memory ceiling]
//!
//! Asking the allocator alone (`try_reserve_exact`, reserved and given back untouched)
//! depends on how the kernel overcommits. Under Linux's default heuristic, a request larger
//! than RAM plus swap is refused; with overcommit always on (`vm.overcommit_memory = 1`,
//! common on container hosts) every request up to the address space is granted, and the
//! process is killed later, when the pages are touched. So a request is first compared
//! with what the machine holds: RAM plus swap from `/proc/meminfo`, or the cgroup's limit
//! (`/sys/fs/cgroup/memory.max`, cgroup v2) plus swap when that is lower; read once. Where
//! neither file exists (other systems), the allocator alone decides. The ceiling only
//! refuses what can never fit: below it, whether memory is free now is the allocator's
//! call.

use std::sync::OnceLock;

/// Why the host cannot give `bytes` bytes, or `None` when it can (Note [Host memory
/// ceiling]): the ceiling, then the allocator (reserved and given back untouched). The
/// reason completes a sentence such as "got 10 bytes, …".
pub fn refusal(bytes: usize) -> Option<String> {
    above_ceiling(bytes).or_else(|| {
        Vec::<u8>::new()
            .try_reserve_exact(bytes)
            .err()
            .map(|_| ALLOCATOR_REFUSED.into())
    })
}

/// Reserves room for `count` more elements in `vec`, after the ceiling check (for host
/// bookkeeping that grows with the configuration); the reason when refused, as
/// [`refusal`] words it.
pub fn try_reserve<T>(vec: &mut Vec<T>, count: usize) -> Result<(), String> {
    if let Some(reason) = above_ceiling(count.saturating_mul(std::mem::size_of::<T>())) {
        return Err(reason);
    }
    vec.try_reserve_exact(count)
        .map_err(|_| ALLOCATOR_REFUSED.into())
}

const ALLOCATOR_REFUSED: &str = "which the allocator refused";

/// The reason `bytes` can never fit on this machine, or `None`.
fn above_ceiling(bytes: usize) -> Option<String> {
    let ceiling = ceiling()?;
    (bytes > ceiling)
        .then(|| format!("more than this machine's memory, {ceiling} bytes of RAM and swap"))
}

/// The most memory this process can ever hold, in bytes (Note [Host memory ceiling]).
fn ceiling() -> Option<usize> {
    static CEILING: OnceLock<Option<usize>> = OnceLock::new();
    *CEILING.get_or_init(|| {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok();
        memory_ceiling(&meminfo, cgroup.as_deref())
    })
}

/// RAM plus swap from the text of `/proc/meminfo`, lowered to the cgroup's `memory.max`
/// plus swap when that is a number below it; `None` when `MemTotal` is missing.
fn memory_ceiling(meminfo: &str, cgroup_max: Option<&str>) -> Option<usize> {
    let kib = |key: &str| {
        meminfo.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?.trim();
            rest.strip_suffix("kB")?.trim().parse::<usize>().ok()
        })
    };
    let swap = kib("SwapTotal").unwrap_or(0).saturating_mul(1024);
    let machine = kib("MemTotal")?.saturating_mul(1024).saturating_add(swap);
    let cgroup = cgroup_max
        .and_then(|text| text.trim().parse::<usize>().ok())
        .map(|limit| limit.saturating_add(swap));
    Some(cgroup.map_or(machine, |limit| limit.min(machine)))
}

#[cfg(test)]
mod tests {
    use super::{memory_ceiling, refusal, try_reserve};

    const MEMINFO: &str = "MemTotal:       24684084 kB\nMemFree:        22000000 kB\n\
                           SwapTotal:       1048576 kB\nSwapFree:        1048576 kB\n";

    #[test]
    fn the_ceiling_is_ram_plus_swap_or_the_cgroup_limit_plus_swap() {
        let machine = (24684084 + 1048576) * 1024;
        assert_eq!(memory_ceiling(MEMINFO, None), Some(machine));
        assert_eq!(memory_ceiling(MEMINFO, Some("max\n")), Some(machine));
        assert_eq!(
            memory_ceiling(MEMINFO, Some("4294967296\n")),
            Some(4294967296 + 1048576 * 1024)
        );
        // A cgroup limit above the machine does not raise the ceiling.
        assert_eq!(
            memory_ceiling(MEMINFO, Some("1099511627776")),
            Some(machine)
        );
        assert_eq!(memory_ceiling("MemFree: 1 kB\n", None), None);
        assert_eq!(
            memory_ceiling("MemTotal: 1000 kB\n", None),
            Some(1000 * 1024),
            "no swap line: no swap"
        );
    }

    #[test]
    fn a_small_request_is_granted_and_an_impossible_one_refused() {
        assert_eq!(refusal(1 << 20), None);
        // Past the address space: refused by the ceiling where there is one, by the
        // allocator everywhere.
        assert!(refusal(usize::MAX / 2).is_some());
        let mut v: Vec<u64> = Vec::new();
        assert_eq!(try_reserve(&mut v, 1000), Ok(()));
        assert!(v.capacity() >= 1000);
        assert!(try_reserve(&mut v, usize::MAX / 16).is_err());
    }
}
