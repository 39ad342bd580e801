/* The kernel the broken specs name: y = 2 * x, STEP elements per step. */
void scale(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i += STEP)
        for (int u = 0; u < STEP && i + u < n; u++)
            y[i + u] = 2.0f * x[i + u];
}
