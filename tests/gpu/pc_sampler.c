// Where one process's main thread spends its CPU time, without a profiler
// on the machine: preloaded, it samples the main thread's program counter
// at each SIGPROF (ITIMER_PROF, every SAMPLER_US microseconds of the
// process's CPU time, rounded up to the kernel's tick) and at exit writes
// the samples and the executable segments' load addresses, which
// tests/gpu/pc_report.py turns into functions with addr2line:
//
//   cc -O2 -fPIC -shared tests/gpu/pc_sampler.c -o /tmp/pc_sampler.so
//   export SAMPLER_COMM=courier-bench SAMPLER_OUT=/tmp/samples
//   LD_PRELOAD=/tmp/pc_sampler.so courier-run -n 1 courier-bench ep ...
//   python3 tests/gpu/pc_report.py /tmp/samples.<pid>
//
// SAMPLER_COMM: sample only the process of that name (others stop an
// inherited timer: an itimer survives exec). SAMPLER_OUT (/tmp/samples):
// the file, with the pid appended. Build the program with -g for names.
// x86-64 Linux (the program counter's register).
#define _GNU_SOURCE
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "pc_sampler reads the x86-64 program counter (REG_RIP)"
#endif

enum { kMaxSamples = 1 << 21 };
static unsigned long samples[kMaxSamples];
static long taken;
static pid_t sampled_tid;  // the main thread; 0: this process is not sampled
static FILE* out;
static char executable[4096];

static void on_sigprof(int sig, siginfo_t* info, void* context) {
  (void)sig;
  (void)info;
  if ((pid_t)syscall(SYS_gettid) != sampled_tid) return;
  const long i = __atomic_fetch_add(&taken, 1, __ATOMIC_RELAXED);
  if (i < kMaxSamples)
    samples[i] = (unsigned long)((ucontext_t*)context)->uc_mcontext.gregs[REG_RIP];
}

static void stop_timer(void) {
  struct itimerval none;
  memset(&none, 0, sizeof none);
  setitimer(ITIMER_PROF, &none, NULL);
}

static int write_segments(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* segment = &info->dlpi_phdr[i];
    if (segment->p_type != PT_LOAD || (segment->p_flags & PF_X) == 0) continue;
    fprintf(out, "M %lx %lx %lx %s\n", (unsigned long)(info->dlpi_addr + segment->p_vaddr),
            (unsigned long)segment->p_memsz, (unsigned long)info->dlpi_addr,
            info->dlpi_name[0] != '\0' ? info->dlpi_name : executable);
  }
  return 0;
}

__attribute__((constructor)) static void start_sampling(void) {
  const char* only = getenv("SAMPLER_COMM");
  if (only != NULL) {
    char name[64] = {0};
    FILE* comm = fopen("/proc/self/comm", "r");
    if (comm != NULL) {
      if (fgets(name, sizeof name, comm) != NULL) name[strcspn(name, "\n")] = '\0';
      fclose(comm);
    }
    if (strcmp(name, only) != 0) {
      stop_timer();
      return;
    }
  }
  sampled_tid = getpid();
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_sigprof;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &action, NULL);
  const long us = getenv("SAMPLER_US") != NULL ? atol(getenv("SAMPLER_US")) : 100;
  struct itimerval every = {{0, us}, {0, us}};
  setitimer(ITIMER_PROF, &every, NULL);
}

__attribute__((destructor)) static void write_samples(void) {
  if (sampled_tid == 0) return;
  stop_timer();
  char path[4096];
  const char* base = getenv("SAMPLER_OUT") != NULL ? getenv("SAMPLER_OUT") : "/tmp/samples";
  snprintf(path, sizeof path, "%s.%d", base, (int)getpid());
  out = fopen(path, "w");
  if (out == NULL) return;
  const ssize_t n = readlink("/proc/self/exe", executable, sizeof executable - 1);
  executable[n > 0 ? n : 0] = '\0';
  dl_iterate_phdr(write_segments, NULL);
  const long count = taken < kMaxSamples ? taken : kMaxSamples;
  for (long i = 0; i < count; ++i) fprintf(out, "P %lx\n", samples[i]);
  fclose(out);
}
