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
    allowed: Mutex<HashMap<&'static str, usize>>,
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

    /// Lets `f` (kernel `name`) use `bytes` of dynamic shared memory, opting in past 48 KiB; an
    /// error naming `op` where the device allows less.
    pub(crate) fn allow(
        &self,
        be: &CudaBackend,
        op: &'static str,
        f: &CudaFunction,
        name: &'static str,
        bytes: usize,
    ) -> Result<()> {
        let optin = self.optin(be)?;
        if bytes > optin {
            return Err(CoreError::Param {
                op,
                msg: format!(
                    "needs {bytes} bytes of shared memory per block, the device allows {optin}"
                ),
            });
        }
        let mut allowed = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
        if bytes <= SMEM_DEFAULT || allowed.get(name).is_some_and(|&b| b >= bytes) {
            return Ok(());
        }
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .map_err(dev(op))?;
        allowed.insert(name, bytes);
        Ok(())
    }
}
