/* digits: draws the digits 0-9 with Kiln's built-in dit-digits model through libkiln, as one PPM grid.
 *   usage: digits MODEL OUT.ppm [SEED]
 * MODEL is dit-digits.kiln from a Kiln build (or models/default/dit-digits). */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>

static int progress(int step, int total, void* user) {
    (void)user;
    fprintf(stderr, "\r  step %d/%d", step, total);
    if (step == total) fputc('\n', stderr);
    return 0; /* non-zero would cancel */
}

/* The images side by side, RGB, binary PPM; written to a temporary name and renamed. */
static int write_ppm(const char* path, const unsigned char* rgba, int w, int h, int n) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f) return 0;
    fprintf(f, "P6\n%d %d\n255\n", w * n, h);
    for (int y = 0; y < h; ++y)
        for (int i = 0; i < n; ++i)
            for (int x = 0; x < w; ++x) fwrite(rgba + (((size_t)i * h + y) * w + x) * 4, 1, 3, f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) return 0;
    return 1;
}

static int fail(const char* what, kiln_status s) {
    fprintf(stderr, "digits: %s: %s: %s\n", what, kiln_status_name(s), kiln_last_error());
    return 1;
}

static int run(kiln_model* model, const char* out, unsigned long long seed) {
    int labels[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    kiln_generate_params p = KILN_GENERATE_PARAMS_INIT;
    p.class_labels = labels;
    p.class_label_count = 10;
    p.seed = seed;
    p.progress = progress;
    kiln_image img = KILN_IMAGE_INIT;
    img.format = KILN_PIXELS_RGBA8;
    kiln_status s = kiln_generate(model, &p, &img); /* data NULL: the size query */
    if (s != KILN_OK) return fail("kiln_generate (size)", s);
    img.data = malloc(img.required_bytes);
    img.capacity = img.required_bytes;
    if (!img.data) return fail("malloc", KILN_OUT_OF_MEMORY);
    s = kiln_generate(model, &p, &img);
    int rc = 0;
    if (s != KILN_OK)
        rc = fail("kiln_generate", s);
    else if (!write_ppm(out, img.data, img.width, img.height, img.count))
        fprintf(stderr, "digits: cannot write %s\n", out), rc = 1;
    else
        fprintf(stderr, "wrote %s (%d images of %dx%d)\n", out, img.count, img.width, img.height);
    free(img.data);
    return rc;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL OUT.ppm [SEED]\n", argv[0]);
        return 2;
    }
    kiln_context* ctx = NULL;
    kiln_model* model = NULL;
    kiln_status s = kiln_context_create(NULL, &ctx);
    if (s != KILN_OK) return fail("kiln_context_create", s);
    kiln_device_info dev = KILN_DEVICE_INFO_INIT;
    if (kiln_context_get_device(ctx, &dev) == KILN_OK) fprintf(stderr, "libkiln %s on %s\n", kiln_version(), dev.name);
    int rc;
    s = kiln_model_open(ctx, argv[1], &model);
    if (s != KILN_OK)
        rc = fail("kiln_model_open", s);
    else
        rc = run(model, argv[2], argc > 3 ? strtoull(argv[3], NULL, 10) : 0);
    kiln_model_destroy(model);
    kiln_context_destroy(ctx);
    return rc;
}
