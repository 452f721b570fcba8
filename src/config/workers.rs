//! How many workers and on which CPUs (`--workers`, `--cpus`, `--cpu`).
//! Sans-I/O: the
//! CPUs the process may use are the caller's (`runtime::allowed_cpus`).

use super::fields::Config;
use super::values::{Workers, MAX_WORKERS};

impl Config {
    /// The CPU of each worker, in worker order: `--cpus` (its first N
    /// with `--workers N`), else `--cpu` for one worker, else the first N
    /// of `allowed` (the CPUs the process may use, in order).
    pub fn worker_cpus(&self, allowed: &[usize]) -> Result<Vec<usize>, String> {
        let from: Vec<usize> = match (&self.cpus, self.cpu) {
            (Some(list), _) => list.clone(),
            (None, Some(cpu)) => vec![cpu],
            (None, None) if allowed.is_empty() => vec![0],
            (None, None) => allowed.to_vec(),
        };
        let n = match self.workers {
            Workers::Auto => from.len().min(MAX_WORKERS),
            Workers::Count(n) => n,
        };
        if n > from.len() {
            let whence = match (&self.cpus, self.cpu) {
                (Some(_), _) => "--cpus lists",
                (None, Some(_)) => "--cpu names one; use --cpus for more",
                (None, None) => "the process may use",
            };
            return Err(format!(
                "--workers {n}: more workers than CPUs ({} {whence})",
                from.len()
            ));
        }
        Ok(from[..n].to_vec())
    }

    /// Whether more than one worker may run (`--workers` other than 1).
    pub fn multi_worker(&self) -> bool {
        self.workers != Workers::Count(1)
    }

    pub(super) fn validate_workers(&self) -> Result<(), String> {
        if self.cpu.is_some() && self.cpus.is_some() {
            let e = "--cpu and --cpus are exclusive: --cpu N is the one-worker form of --cpus N";
            return Err(e.into());
        }
        Ok(())
    }
}
