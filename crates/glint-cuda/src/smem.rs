//! Dynamic shared memory past the 48 KiB every launch may use: the device's opt-in limit,
//! asked once, and the attribute each kernel has been given (`cuFuncSetAttribute`), set once
//! per kernel and size. Attention, the indexer and the staged products share it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::CudaFunction;
use glint_core::{CoreError, Result};

use crate::backend::{dev, CudaBackend};

/// Dynamic shared memory a launch may use without opting in.
pub(crate) const SMEM_DEFAULT: usize = 48 * 1024;

#[derive(Default)]
pub struct SmemState {
    optin: OnceLock<usize>,
    /// Per kernel: its static shared memory, and the dynamic size its attribute allows.
    allowed: Mutex<HashMap<&'static str, (usize, usize)>>,
}

impl SmemState {
    /// The device's per-block limit with opting in (at least [`SMEM_DEFAULT`]).
    pub(crate) fn optin(&self, be: &CudaBackend) -> Result<usize> {
        if let Some(&v) = self.optin.get() {
            return Ok(v);
        }
        let v = be
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(dev("querying the CUDA device"))?;
        Ok(*self
            .optin
            .get_or_init(|| (v.max(0) as usize).max(SMEM_DEFAULT)))
    }

    /// The most dynamic shared memory `f` (kernel `name`) can be allowed: the device's opt-in
    /// limit less the kernel's static shared memory.
    pub(crate) fn dynamic_limit(
        &self,
        be: &CudaBackend,
        op: &'static str,
        f: &CudaFunction,
        name: &'static str,
    ) -> Result<usize> {
        let optin = self.optin(be)?;
        let mut allowed = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
        let (statics, _) = entry(&mut allowed, op, f, name)?;
        Ok(optin.saturating_sub(statics))
    }

    /// Lets `f` (kernel `name`) use `bytes` of dynamic shared memory, opting in where its
    /// static shared memory and `bytes` pass 48 KiB; an error naming `op` where the device
    /// allows less. The static part counts against both limits: a kernel with 272 bytes of
    /// its own and exactly 48 KiB dynamic fails to launch without the opt-in.
    pub(crate) fn allow(
        &self,
        be: &CudaBackend,
        op: &'static str,
        f: &CudaFunction,
        name: &'static str,
        bytes: usize,
    ) -> Result<()> {
        let optin = self.optin(be)?;
        let mut allowed = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
        let (statics, done) = entry(&mut allowed, op, f, name)?;
        if bytes + statics > optin {
            return Err(CoreError::Param {
                op,
                msg: format!(
                    "needs {bytes} + {statics} (static) bytes of shared memory per block, the \
                     device allows {optin}"
                ),
            });
        }
        if bytes + statics <= SMEM_DEFAULT || done >= bytes {
            return Ok(());
        }
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .map_err(dev(op))?;
        allowed.insert(name, (statics, bytes));
        Ok(())
    }
}

/// Kernel `name`'s (static shared memory, dynamic size allowed so far), its static size asked
/// of the driver the first time.
fn entry(
    allowed: &mut HashMap<&'static str, (usize, usize)>,
    op: &'static str,
    f: &CudaFunction,
    name: &'static str,
) -> Result<(usize, usize)> {
    if let Some(&e) = allowed.get(name) {
        return Ok(e);
    }
    let statics = f.shared_size_bytes().map_err(dev(op))?.max(0) as usize;
    allowed.insert(name, (statics, 0));
    Ok((statics, 0))
}
