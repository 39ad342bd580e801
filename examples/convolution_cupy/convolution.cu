// A 2D convolution (correlation) of an (N + FH - 1) x (N + FW - 1) float32 image with an
// FH x FW filter into an N x N output; N, FH and FW come as -D compiler options.
//
// Each thread block computes a BH x BW tile of the output, BH = block_size_y * tile_size_y rows
// and BW = block_size_x * tile_size_x columns; each thread computes tile_size_y x tile_size_x
// outputs, block_size_y rows and block_size_x columns apart, so a warp's reads from shared
// memory and its stores are contiguous. The block first stages the input its tile needs,
// (BH + FH - 1) x (BW + FW - 1) values, in shared memory; use_padding adds a column to each
// staged row, which changes which bank a row starts in. N must be a multiple of BH and BW.

#define BH (block_size_y * tile_size_y)
#define BW (block_size_x * tile_size_x)
#define STAGED_H (BH + FH - 1)
#define STAGED_W (BW + FW - 1)
#define PITCH (STAGED_W + use_padding)

extern "C" __global__ void convolution(float *output, const float *__restrict__ input,
                                       const float *__restrict__ filter) {
    __shared__ float staged[STAGED_H][PITCH];

    const int row0 = blockIdx.y * BH;
    const int col0 = blockIdx.x * BW;
    const int input_w = N + FW - 1;
    for (int i = threadIdx.y; i < STAGED_H; i += block_size_y)
        for (int j = threadIdx.x; j < STAGED_W; j += block_size_x)
            staged[i][j] = input[(row0 + i) * input_w + col0 + j];
    __syncthreads();

    float acc[tile_size_y][tile_size_x];
#pragma unroll
    for (int ty = 0; ty < tile_size_y; ty++)
#pragma unroll
        for (int tx = 0; tx < tile_size_x; tx++)
            acc[ty][tx] = 0.0f;

    for (int fi = 0; fi < FH; fi++) {
        for (int fj = 0; fj < FW; fj++) {
            const float f = filter[fi * FW + fj];
#pragma unroll
            for (int ty = 0; ty < tile_size_y; ty++)
#pragma unroll
                for (int tx = 0; tx < tile_size_x; tx++)
                    acc[ty][tx] += staged[threadIdx.y + ty * block_size_y + fi][threadIdx.x + tx * block_size_x + fj] * f;
        }
    }

#pragma unroll
    for (int ty = 0; ty < tile_size_y; ty++)
#pragma unroll
        for (int tx = 0; tx < tile_size_x; tx++)
            output[(row0 + threadIdx.y + ty * block_size_y) * N + col0 + threadIdx.x + tx * block_size_x] = acc[ty][tx];
}
