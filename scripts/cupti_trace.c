// A CUDA injection library (loaded by the driver from CUDA_INJECTION64_PATH) that records every
// kernel's start and end with CUPTI's concurrent-kernel activity, graph nodes included, and
// writes them as CSV to $GLINT_CUPTI_OUT at exit. The device machines have no Nsight Systems
// (docs/cuda.md), and Nsight Compute serializes launches, so this is how scripts/
// cuda-timeline.sh sees a decode step's kernels as a graph replay runs them (programmatic
// dependent launch and the second stream overlapping, caches warm). Built on the GPU machine
// against its CUPTI; KREC is the newest CUpti_ActivityKernelN its header declares.
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef KREC
#define KREC CUpti_ActivityKernel10
#endif

enum { BUF_BYTES = 8 << 20 };
static FILE* out;

static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = (uint8_t*)aligned_alloc(8, BUF_BYTES);
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity* rec = NULL;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const KREC* k = (const KREC*)rec;
        fprintf(out, "%llu,%llu,%u,%d,%llu,\"%s\"\n", (unsigned long long)k->start,
                (unsigned long long)(k->end - k->start), k->streamId, k->gridX,
                (unsigned long long)k->graphNodeId, k->name ? k->name : "?");
    }
    free(buffer);
}

static void finish(void) {
    cuptiActivityFlushAll(1);
    if (out) fclose(out);
    out = NULL;
}

int InitializeInjection(void) {
    const char* path = getenv("GLINT_CUPTI_OUT");
    out = fopen(path ? path : "cupti-trace.csv", "w");
    if (!out) return 0;
    fprintf(out, "Start (ns),Duration (ns),Strm,GrdX,GraphNode,Name\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: CUPTI would not record kernels\n");
        return 0;
    }
    atexit(finish);
    return 1;
}
