/* Tiled matrix multiply C = A * B for square N x N float matrices (row-major).
 *
 * Tunable at compile time:
 *   TILE_I, TILE_J, TILE_K  cache tile sizes along rows of C, columns of C, and the sum
 *   UNROLL_J                how many columns of C the innermost loop updates per step
 */
#ifndef N
#error "N (matrix size) must be defined"
#endif

void matmul(float *restrict c, const float *restrict a, const float *restrict b)
{
    for (int i = 0; i < N * N; i++)
        c[i] = 0.0f;
    for (int ii = 0; ii < N; ii += TILE_I)
        for (int kk = 0; kk < N; kk += TILE_K)
            for (int jj = 0; jj < N; jj += TILE_J)
                for (int i = ii; i < ii + TILE_I && i < N; i++)
                    for (int k = kk; k < kk + TILE_K && k < N; k++) {
                        const float aik = a[i * N + k];
                        const float *brow = &b[k * N];
                        float *crow = &c[i * N];
                        int j = jj;
                        int jend = (jj + TILE_J < N) ? jj + TILE_J : N;
                        for (; j + UNROLL_J <= jend; j += UNROLL_J)
                            for (int u = 0; u < UNROLL_J; u++)
                                crow[j + u] += aik * brow[j + u];
                        for (; j < jend; j++)
                            crow[j] += aik * brow[j];
                    }
}
