//! NCCL on CUDA buffers (`--features cuda`, a GPU and libnccl; scripts/cuda-tests.sh): world
//! size 1 on device 0 (an all-reduce of one rank is the identity, a gather copies), and on a
//! machine with several GPUs every device as one rank of one group (`ncclCommInitAll`), each
//! collective against the sums computed on the host.
#![cfg(feature = "cuda")]

use glint_core::Backend;
use glint_cuda::CudaBackend;
use glint_tp::{Communicator, NcclComm};

fn input(r: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + r * 13) % 11) as f32 * 0.25)
        .collect()
}

#[test]
fn world_one_collectives_are_identities() {
    let be = CudaBackend::new(0).expect("CUDA device 0");
    let c = NcclComm::new(&be, 0, 1, NcclComm::unique_id().expect("NCCL")).expect("NCCL comm");
    let n = 1000;
    let mut buf = be.upload(&input(0, n)).unwrap();
    c.all_reduce_sum(&be, &mut buf, n).unwrap();
    let mut dst = be.alloc(n).unwrap();
    c.all_gather(&be, &buf, n, &mut dst).unwrap();
    let mut rs = be.alloc(n).unwrap();
    c.reduce_scatter_sum(&be, &dst, n, &mut rs).unwrap();
    c.broadcast(&be, &mut rs, n, 0).unwrap();
    c.barrier(&be).unwrap();
    let mut out = vec![0f32; n];
    be.download(&rs, &mut out).unwrap();
    assert_eq!(out, input(0, n));
}

#[test]
fn every_gpu_one_rank() {
    let n_dev = glint_cuda::device_count().unwrap_or(0);
    if n_dev < 2 {
        eprintln!("{n_dev} GPU(s): the multi-GPU NCCL check needs 2 or more");
        return;
    }
    let bes: Vec<CudaBackend> = (0..n_dev).map(|d| CudaBackend::new(d).unwrap()).collect();
    let comms = NcclComm::for_devices(&bes).expect("ncclCommInitAll");
    let n = 4096;
    let want: Vec<f32> = (0..n)
        .map(|i| (0..n_dev).map(|r| input(r, n)[i]).sum())
        .collect();
    std::thread::scope(|s| {
        for (r, (be, c)) in bes.iter().zip(&comms).enumerate() {
            let want = &want;
            s.spawn(move || {
                let mut buf = be.upload(&input(r, n)).unwrap();
                c.all_reduce_sum(be, &mut buf, n).unwrap();
                c.barrier(be).unwrap();
                let mut out = vec![0f32; n];
                be.download(&buf, &mut out).unwrap();
                // Small integers times 0.25: exact in any summation order.
                assert_eq!(&out, want, "rank {r}");
            });
        }
    });
}
