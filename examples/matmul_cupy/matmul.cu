// C = A * B for square row-major float32 matrices of size N (a -DN=... compiler option).
//
// Each thread block computes a BM x BN tile of C, BM = block_size_y * tile_size_y rows and
// BN = block_size_x * tile_size_x columns; each thread accumulates tile_size_y x tile_size_x
// outputs in registers. The K dimension is walked in slabs of tile_k: the threads of a
// block stage BM x tile_k of A (transposed) and tile_k x BN of B in shared memory, then
// every thread reads one column of A's slab and one row of B's slab per step.
// Outputs of a thread are block_size_x / block_size_y apart, so a warp's loads from shared
// memory and its stores to C are contiguous. N must be a multiple of BM and BN.

#define BM (block_size_y * tile_size_y)
#define BN (block_size_x * tile_size_x)
#define THREADS (block_size_x * block_size_y)

extern "C" __global__ void matmul(float *C, const float *A, const float *B) {
    __shared__ float As[tile_k][BM];
    __shared__ float Bs[tile_k][BN];

    const int tid = threadIdx.y * block_size_x + threadIdx.x;
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[tile_size_y][tile_size_x];
#pragma unroll
    for (int i = 0; i < tile_size_y; i++)
#pragma unroll
        for (int j = 0; j < tile_size_x; j++)
            acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < N; k0 += tile_k) {
#pragma unroll
        for (int e = tid; e < BM * tile_k; e += THREADS) {
            const int r = e / tile_k, k = e % tile_k;
            As[k][r] = A[(size_t)(row0 + r) * N + k0 + k];
        }
#pragma unroll
        for (int e = tid; e < tile_k * BN; e += THREADS) {
            const int k = e / BN, c = e % BN;
            Bs[k][c] = B[(size_t)(k0 + k) * N + col0 + c];
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < tile_k; k++) {
            float a[tile_size_y], b[tile_size_x];
#pragma unroll
            for (int i = 0; i < tile_size_y; i++)
                a[i] = As[k][threadIdx.y + i * block_size_y];
#pragma unroll
            for (int j = 0; j < tile_size_x; j++)
                b[j] = Bs[k][threadIdx.x + j * block_size_x];
#pragma unroll
            for (int i = 0; i < tile_size_y; i++)
#pragma unroll
                for (int j = 0; j < tile_size_x; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < tile_size_y; i++)
#pragma unroll
        for (int j = 0; j < tile_size_x; j++)
            C[(size_t)(row0 + threadIdx.y + i * block_size_y) * N + col0 + threadIdx.x + j * block_size_x] =
                acc[i][j];
}
