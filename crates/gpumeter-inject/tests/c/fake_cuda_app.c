/*
 * fake_cuda_app.c: plays the CUDA driver's part for tests on a machine without a GPU. Like
 * cuInit with CUDA_INJECTION64_PATH set, it dlopens that library and calls its
 * InitializeInjection; then it tags some "work" for a tenant through the library's helpers
 * and exits with the status given as its first argument (0 by default), so the injection
 * library's exit handler runs as in a real CUDA program. With fake_cupti.c as libcupti, the
 * recording then holds the fake's kernel records. FAKE_APP_RUN_MS=<ms> (default 0) makes it
 * sleep that long before exiting, as a program whose work runs a while (with the fake's
 * streaming mode, its recording grows meanwhile).
 *
 * Build: cc -o fake_cuda_app fake_cuda_app.c -ldl
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
  const char *path = getenv("CUDA_INJECTION64_PATH");
  if (!path || !*path) {
    puts("fake_cuda_app: no CUDA_INJECTION64_PATH");
    return argc > 1 ? atoi(argv[1]) : 0;
  }
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "fake_cuda_app: %s\n", dlerror());
    return 100;
  }
  int (*init)(void) = (int (*)(void))dlsym(lib, "InitializeInjection");
  if (!init) {
    fprintf(stderr, "fake_cuda_app: no InitializeInjection in %s\n", path);
    return 101;
  }
  int rc = init();
  printf("InitializeInjection=%d\n", rc);
  int (*push)(uint32_t, uint64_t) =
      (int (*)(uint32_t, uint64_t))dlsym(lib, "gpumeter_inject_push_external_id");
  int (*pop)(uint32_t, uint64_t *) =
      (int (*)(uint32_t, uint64_t *))dlsym(lib, "gpumeter_inject_pop_external_id");
  int (*hint)(uint64_t, const char *) =
      (int (*)(uint64_t, const char *))dlsym(lib, "gpumeter_inject_tenant_hint");
  if (push && pop && hint) {
    uint64_t last = 0;
    int a = push(0, 1001);
    int b = hint(1001, "alice");
    int c = pop(0, &last);
    printf("push=%d hint=%d pop=%d last=%llu\n", a, b, c, (unsigned long long)last);
  }
  fflush(stdout);
  const char *run = getenv("FAKE_APP_RUN_MS");
  long ms = run && *run ? strtol(run, NULL, 10) : 0;
  if (ms > 0) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
  }
  return argc > 1 ? atoi(argv[1]) : 0;
}
