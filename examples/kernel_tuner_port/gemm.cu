// C = alpha * A * B + beta * C for square row-major float32 matrices of size N (-DN=...),
// alpha and beta in constant memory. The same tiling as examples/matmul_cupy/matmul.cu, with
// the register tile as template arguments (TILE_X, TILE_Y) and B's slab of tile_k x BN floats
// in dynamic shared memory, sized by the tuner (smem_args).

#define BM (block_size_y * TILE_Y)
#define BN (block_size_x * TILE_X)
#define THREADS (block_size_x * block_size_y)

__constant__ float alpha_beta[2];

template <int TILE_X, int TILE_Y>
__global__ void gemm(float *C, const float *A, const float *B) {
    __shared__ float As[tile_k][BM];
    extern __shared__ float Bs[];  // tile_k x BN

    const int tid = threadIdx.y * block_size_x + threadIdx.x;
    const int row0 = blockIdx.y * BM;
    const int col0 = blockIdx.x * BN;

    float acc[TILE_Y][TILE_X];
#pragma unroll
    for (int i = 0; i < TILE_Y; i++)
#pragma unroll
        for (int j = 0; j < TILE_X; j++)
            acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < N; k0 += tile_k) {
        for (int e = tid; e < BM * tile_k; e += THREADS) {
            const int r = e / tile_k, k = e % tile_k;
            As[k][r] = A[(size_t)(row0 + r) * N + k0 + k];
        }
        for (int e = tid; e < tile_k * BN; e += THREADS) {
            const int k = e / BN, c = e % BN;
            Bs[k * BN + c] = B[(size_t)(k0 + k) * N + col0 + c];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < tile_k; k++) {
            float a[TILE_Y], b[TILE_X];
#pragma unroll
            for (int i = 0; i < TILE_Y; i++)
                a[i] = As[k][threadIdx.y + i * block_size_y];
#pragma unroll
            for (int j = 0; j < TILE_X; j++)
                b[j] = Bs[k * BN + threadIdx.x + j * block_size_x];
#pragma unroll
            for (int i = 0; i < TILE_Y; i++)
#pragma unroll
                for (int j = 0; j < TILE_X; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    const float alpha = alpha_beta[0], beta = alpha_beta[1];
#pragma unroll
    for (int i = 0; i < TILE_Y; i++)
#pragma unroll
        for (int j = 0; j < TILE_X; j++) {
            const size_t at = (size_t)(row0 + threadIdx.y + i * block_size_y) * N + col0 + threadIdx.x + j * block_size_x;
            C[at] = alpha * acc[i][j] + beta * C[at];
        }
}
