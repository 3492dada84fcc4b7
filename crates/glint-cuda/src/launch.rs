//! Kernel launches with programmatic dependent launch (PDL, sm_90+).
//!
//! A decode step is ~45 small kernels a layer; between two of them the GPU drains one grid,
//! then processes the next launch and places its blocks, a few microseconds each time. With
//! the programmatic-serialization attribute a kernel's blocks are placed while its predecessor
//! still runs and wait in `griddepcontrol.wait` (kernels/common.cuh's `pdl_enter`, the first
//! statement of every kernel) until the predecessor has finished and its writes are visible.
//! Stream capture keeps these edges, so recorded steps get the overlap too. The arithmetic of
//! every kernel is unchanged; only when it may start is.
//!
//! Every kernel launched through [`Launch`] must begin with `pdl_enter()`: one that read its
//! inputs before the wait would race its predecessor (`every_entry_waits_for_its_predecessor`
//! in tests/compile.rs checks the compiled PTX). Work not launched here (NCCL, copies) keeps the
//! stream's full ordering on both sides.

use std::ffi::c_void;

use cudarc::driver::{
    sys, CudaFunction, CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DriverError,
    LaunchConfig,
};

use crate::backend::CudaBackend;

/// One kernel parameter: the address of a host value the caller keeps alive for the builder's
/// lifetime, or a device address held here.
pub(crate) enum Slot {
    Host(*const c_void),
    Device(sys::CUdeviceptr),
}

/// A launch being assembled: `be.launch(&f).arg(..)...launch(cfg)`, the shape of cudarc's
/// `LaunchArgs`, which cannot pass launch attributes.
pub(crate) struct Launch<'a> {
    be: &'a CudaBackend,
    func: &'a CudaFunction,
    slots: Vec<Slot>,
}

/// What may be passed as a kernel parameter.
pub(crate) trait KernelArg<'a> {
    fn slot(self, be: &CudaBackend) -> Slot;
}

macro_rules! host_args {
    ($($t:ty),*) => {$(
        impl<'a> KernelArg<'a> for &'a $t {
            fn slot(self, _: &CudaBackend) -> Slot {
                Slot::Host(self as *const $t as *const c_void)
            }
        }
    )*};
}
host_args!(i32, u32, i64, u64, f32);

impl<'a, T> KernelArg<'a> for &'a CudaSlice<T> {
    fn slot(self, be: &CudaBackend) -> Slot {
        Slot::Device(self.device_ptr(&be.stream).0)
    }
}

impl<'a, T> KernelArg<'a> for &'a mut CudaSlice<T> {
    fn slot(self, be: &CudaBackend) -> Slot {
        Slot::Device(self.device_ptr_mut(&be.stream).0)
    }
}

impl<'a, 'b: 'a, T> KernelArg<'a> for &'a CudaView<'b, T> {
    fn slot(self, be: &CudaBackend) -> Slot {
        Slot::Device(self.device_ptr(&be.stream).0)
    }
}

impl<'a, 'b: 'a, T> KernelArg<'a> for &'a mut CudaViewMut<'b, T> {
    fn slot(self, be: &CudaBackend) -> Slot {
        Slot::Device(self.device_ptr_mut(&be.stream).0)
    }
}

impl<'a> Launch<'a> {
    pub(crate) fn new(be: &'a CudaBackend, func: &'a CudaFunction) -> Self {
        Self {
            be,
            func,
            slots: Vec::with_capacity(24),
        }
    }

    pub(crate) fn arg(&mut self, a: impl KernelArg<'a>) -> &mut Self {
        let s = a.slot(self.be);
        self.slots.push(s);
        self
    }

    /// Issues the kernel on the backend's current stream (fork.rs), with the PDL attribute where the device and
    /// `GLINT_CUDA_PDL` allow it.
    ///
    /// # Safety
    /// The parameters must match the kernel's signature in number, order and type, and every
    /// device buffer must be large enough for what the kernel touches (the launchers check
    /// sizes before they get here).
    pub(crate) unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        self.be.ctx.bind_to_thread()?;
        let mut params: Vec<*mut c_void> = self
            .slots
            .iter()
            .map(|s| match s {
                Slot::Host(p) => *p as *mut c_void,
                Slot::Device(d) => d as *const sys::CUdeviceptr as *mut c_void,
            })
            .collect();
        // SAFETY: an all-zero attribute is valid (id 0 = ignore); both fields are then set.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.be.cur_stream().cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(self.be.pdl),
        };
        // SAFETY: `params` points at `self.slots`' values and the caller's host values, all
        // alive until this call returns (the driver copies them at launch).
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }
}

/// PDL is on for compute capability 9.0 and up unless `GLINT_CUDA_PDL=0` (for A/B timing and
/// as a way back should a driver mishandle it).
pub(crate) fn pdl_default(major: i32) -> bool {
    major >= 9 && std::env::var("GLINT_CUDA_PDL").map_or(true, |v| v != "0")
}
