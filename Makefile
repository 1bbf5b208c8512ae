# gdn-steps: Gated DeltaNet from a sequential loop to a fast kernel, one stage at a time.
# `make help` lists the targets. Builds are warning-free with -Wall -Wextra.

PRECISION ?= float
CC        ?= gcc
ifeq ($(origin CC),default)
CC        := gcc
endif

ifeq ($(PRECISION),double)
PRECISION_FLAGS := -DGDN_DOUBLE
BIN             := bin/double
else ifeq ($(PRECISION),float)
PRECISION_FLAGS :=
BIN             := bin
else
$(error PRECISION must be float or double, not '$(PRECISION)')
endif

BUILD   := build/$(PRECISION)
# SANITIZE=1: every CPU binary and test built with AddressSanitizer and UndefinedBehavior-
# Sanitizer (any report fails the run), into their own bin/sanitize/ and build/*-sanitize/.
ifeq ($(SANITIZE),1)
BIN     := $(subst bin,bin/sanitize,$(BIN))
BUILD   := $(BUILD)-sanitize
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g
endif
# VALGRIND_BUILD=1 (used by `make valgrind`): no -march=native, whose AVX-512 valgrind cannot run.
ifeq ($(VALGRIND_BUILD),1)
BIN     := $(subst bin,bin/valgrind,$(BIN))
BUILD   := $(BUILD)-valgrind
CFLAGS  ?= -O2 -g
endif
CFLAGS  ?= -O3 -march=native
CFLAGS  += -std=c11 -fopenmp -Wall -Wextra -D_POSIX_C_SOURCE=200809L $(PRECISION_FLAGS) $(SANITIZE_FLAGS)
LDLIBS  := -lm

# Stages are the folders steps/NN_name; each builds bin/NN_name from steps/NN_name/name.c.
# Stage 08 runs under MPI: built with mpicc, where there is one, and not by the generic rules.
STAGES     := $(sort $(notdir $(wildcard steps/[0-9][0-9]_*)))
MPI_STAGES := 08_context_parallel
# Stages from 06 on run only on the GPU: their folder holds name.cu and no name.c.
GPU_ONLY_STAGES := $(foreach s,$(STAGES),$(if $(wildcard steps/$(s)/$(shell echo $(s) | sed 's/^[0-9]*_//').c),,$(s)))
CPU_STAGES := $(filter-out $(MPI_STAGES) $(GPU_ONLY_STAGES),$(STAGES))
# A stage may reuse an earlier stage's pieces (the lesson builds on them); list them here.
USES_03_parallel_scan  := 02_affine
USES_04_two_phase_scan := 01_naive_loop
USES_05_wy_chunked     :=
USES_06_warp_specialized := 05_wy_chunked
USES_07_sequence_parallel := 05_wy_chunked
USES_10_backward_chunked := 05_wy_chunked
USES_11_backward_tensor_cores := 10_backward_chunked 05_wy_chunked
USES_12_backward_fused := 10_backward_chunked 05_wy_chunked
USES_13_backward_states := 10_backward_chunked 05_wy_chunked

COMMON_SOURCES := $(filter-out common/main.c,$(wildcard common/*.c))
COMMON_OBJECTS := $(COMMON_SOURCES:%.c=$(BUILD)/%.o)
stage_source    = steps/$(1)/$(shell echo $(1) | sed 's/^[0-9]*_//').c
stage_object    = $(BUILD)/steps/$(1).o
STAGE_OBJECTS  := $(foreach s,$(CPU_STAGES),$(call stage_object,$(s))) $(BUILD)/steps/08_summaries.o
STAGE_BINARIES := $(CPU_STAGES:%=$(BIN)/%)

# GPU twins: a stage folder holding name.cu also builds bin/NN_name_cuda (float build only;
# GPU stages compute in fp32). nvcc compiles for CUDA_ARCH; the binaries link the CPU twin's
# object (for its flop count) and run anywhere, failing with one line where there is no GPU.
# Position-independent host code (-fPIC): the Python package's library links the same objects.
NVCC        ?= nvcc
CUDA_ARCH   ?= sm_90a
NVCCFLAGS   ?= -O3
NVCCFLAGS   += -std=c++20 -arch=$(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-fPIC -Xptxas -warn-spills,-warn-lmem-usage
HAVE_NVCC   := $(shell command -v $(NVCC) 2>/dev/null)
# nvcc objects depend on the flags they were built with (the stamp's text): a change rebuilds them
NVCC_FLAGS_STAMP := $(BUILD)/nvcc_flags
ifeq ($(PRECISION)$(SANITIZE)$(VALGRIND_BUILD),float)
ifneq ($(HAVE_NVCC),)
GPU_STAGES  := $(filter-out $(GPU_ONLY_STAGES) $(MPI_STAGES),$(sort $(foreach f,$(wildcard steps/*/*.cu),$(notdir $(patsubst %/,%,$(dir $(f)))))))
GPU_ONLY_BUILT := $(GPU_ONLY_STAGES)
endif
endif
gpu_source      = steps/$(1)/$(shell echo $(1) | sed 's/^[0-9]*_//').cu
gpu_object      = $(BUILD)/steps/$(1)_cuda.o
GPU_BINARIES   := $(GPU_STAGES:%=$(BIN)/%_cuda)
GPU_OBJECTS    := $(foreach s,$(GPU_STAGES),$(call gpu_object,$(s))) $(foreach s,$(GPU_ONLY_BUILT),$(call stage_object,$(s)))
GPU_ONLY_BINARIES := $(GPU_ONLY_BUILT:%=$(BIN)/%)
# Sub-stages (rules below): 06 is taught as a series of binaries, 06a_tensor_cores first
SUB_STAGES        := $(if $(GPU_ONLY_BUILT),06a_tensor_cores 06b_producer_consumer 06c_bulk_copies 06d_warp_chain 06e_output_warps 11a_backward_mma_sync)
# every stage and sub-stage in the order a reader meets them: 06a before 06 (NN~ sorts after NNa)
STAGES_IN_ORDER   := $(shell echo $(STAGES) $(SUB_STAGES) | tr ' ' '\n' | sed 's/^\([0-9]*\)_/\1~_/' | LC_ALL=C sort | sed 's/~_/_/')
GPU_OBJECTS       += $(foreach s,$(SUB_STAGES),$(call stage_object,$(s)))
GPU_ONLY_BINARIES += $(SUB_STAGES:%=$(BIN)/%)
CUDA_RUNNER    := $(if $(GPU_STAGES),$(BUILD)/common/cuda_runner.o $(BUILD)/common/cuda_backward_runner.o)

# Stage 08 (MPI): built where mpicc is found.
MPICC     ?= mpicc
HAVE_MPI  := $(shell command -v $(MPICC) 2>/dev/null)
MPI_BINARIES := $(if $(HAVE_MPI),$(BIN)/08_context_parallel)
# Its GPU twin (context_parallel.cu) where nvcc is found too: the .cu never includes mpi.h
# (driver.c makes the MPI calls), so only the link needs MPI's flags.
MPI_GPU_BINARIES := $(if $(and $(HAVE_MPI),$(GPU_STAGES)),$(BIN)/08_context_parallel_cuda)
MPI_LINK_FLAGS = $(patsubst -pthread,-Xcompiler -pthread,$(filter -L% -l% -pthread,$(shell $(MPICC) --showme:link 2>/dev/null)))

# Measuring tools under plots/, built into bin/ beside the stages (gpu_peak where nvcc is found).
TOOLS := $(BIN)/fma_peak $(BIN)/precision_study $(BIN)/error_sources $(BIN)/make_problem $(if $(CUDA_RUNNER),$(BIN)/gpu_peak)

TEST_SOURCES := $(wildcard tests/*.c)
TEST_OBJECTS := $(TEST_SOURCES:%.c=$(BUILD)/%.o)
TEST_RUNNER  := $(BUILD)/run_tests
# The GPU suites (tests/gpu/) have their own runner, built where GPU stages are.
GPU_TEST_SOURCES := $(wildcard tests/gpu/*.c)
GPU_TEST_KERNELS := $(wildcard tests/gpu/*.cu) # kernels of their own that a GPU suite runs (wgmma_layout.cu)
GPU_TEST_RUNNER  := $(if $(GPU_STAGES),$(BUILD)/run_gpu_tests)

.PHONY: all demo demo-binaries demo-gpu-binaries test test-one test-python check test-large bench plots diffs step-diffs docs clean help require-build require-test fuzz valgrind lib
.DEFAULT_GOAL := all

all: $(STAGE_BINARIES) $(MPI_BINARIES) $(MPI_GPU_BINARIES) $(GPU_BINARIES) $(GPU_ONLY_BINARIES) $(TOOLS)
ifeq ($(HAVE_NVCC),)
ifeq ($(PRECISION)$(SANITIZE)$(VALGRIND_BUILD),float)
	@echo "note: $(NVCC) not found, GPU stages not built (install the CUDA toolkit: https://developer.nvidia.com/cuda-downloads)"
endif
endif

help:
	@echo "gdn-steps targets:"
	@echo "  make              build every stage into bin/ (float); PRECISION=double builds bin/double/"
	@echo "  make demo         run every stage this machine can run on one problem; table of time,"
	@echo "                    speedup, errors (GPU stages built and run only where a GPU answers)"
	@echo "  make test         build and run the Check suites, float and double builds"
	@echo "  make check SUITE=NAME   one Check suite, rebuilt first (PRECISION=double: the double"
	@echo "                    build); without SUITE, the list of suite names"
	@echo "  make bench        sweeps into plots/data/ (QUICK=1: about a minute on 2 cores)"
	@echo "  make plots        render plots/*.png from plots/data/ with gnuplot"
	@echo "  make diffs        write build/diffs/NN_from_MM.diff (each stage against the one before)"
	@echo "                    and refresh the generated blocks (diffs, tables) in docs/ and README.md"
	@echo "  make step-diffs   write build/diffs/06_steps/NN_from_MM.diff: stage 06's steps, each against"
	@echo "                    the one before (the commits in plots/stage06_steps.list; needs a git clone)"
	@echo "  make SANITIZE=1 test   the same suites built with AddressSanitizer + UBSan (bin/sanitize/)"
	@echo "  make fuzz SECONDS=60   libFuzzer (clang) on the .npy reader and the command line"
	@echo "  make valgrind     valgrind memcheck on one run of every CPU binary; fails on any error"
	@echo "  make test-large   stage 01 on a problem whose q holds 2^31 + 128 values (17 GB, minutes)"
	@echo "  make lib          the Python package's native libraries (python/gdn_steps/; pip install . runs it)"
	@echo "  make test-python  pip install . into build/python/, then its pytest suite (CPU; part of make test)"
	@echo "  make clean        remove bin/ and build/"
	@echo "Set-up: demo and test install what is missing (apt-get) or print the command to run."

# ---- set-up: install what a fresh Debian machine lacks, or say the command ----
require-build:
	@sh common/require.sh build
require-test:
	@sh common/require.sh test

# ---- build ----
$(NVCC_FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(NVCCFLAGS)' | cmp -s - $@ || echo '$(NVCCFLAGS)' > $@
FORCE:
.PHONY: FORCE
# Compiler lines are shown short; `make V=1` shows them in full.
ifeq ($(V),1)
quiet =
else
quiet = @echo "  $(1) $@";
endif

$(BUILD)/common/%.o: common/%.c | require-build
	@mkdir -p $(dir $@)
	$(call quiet,CC)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

define stage_rules
$(call stage_object,$(1)): $(call stage_source,$(1)) | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,CC)$$(CC) $$(CFLAGS) -MMD -MP -c $$< -o $$@

$(BUILD)/main_$(1).o: common/main.c | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,CC)$$(CC) $$(CFLAGS) -MMD -MP -DSTAGE_DESCRIPTOR=$(shell echo $(1) | sed 's/^[0-9]*_//')_stage $(if $(findstring _backward_,$(1)),-DBACKWARD_STAGE) -c $$< -o $$@

$(BIN)/$(1): $(BUILD)/main_$(1).o $(call stage_object,$(1)) $(foreach u,$(USES_$(1)),$(call stage_object,$(u))) $(COMMON_OBJECTS)
	@mkdir -p $$(dir $$@)
	$$(call quiet,LINK)$$(CC) $$(CFLAGS) $$^ -o $$@ $$(LDLIBS)
endef
$(foreach s,$(CPU_STAGES),$(eval $(call stage_rules,$(s))))

# Stage 08: its MPI driver with mpicc; its summaries (no MPI) with $(CC), for the tests too.
# In sanitizer builds its tests suppress Open MPI's own leaks (tests/lsan-openmpi.supp); in valgrind
# builds `make valgrind` does (tests/valgrind-openmpi.supp).
$(BUILD)/steps/08_summaries.o: steps/08_context_parallel/summaries.c | require-build
	@mkdir -p $(dir $@)
	$(call quiet,CC)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/steps/08_context_parallel.o: steps/08_context_parallel/context_parallel.c | require-build
	@mkdir -p $(dir $@)
	$(call quiet,MPICC)$(MPICC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/steps/08_driver.o: steps/08_context_parallel/driver.c | require-build
	@mkdir -p $(dir $@)
	$(call quiet,MPICC)$(MPICC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BIN)/08_context_parallel: $(BUILD)/steps/08_context_parallel.o $(BUILD)/steps/08_driver.o $(BUILD)/steps/08_summaries.o \
                            $(call stage_object,02_affine) $(call stage_object,05_wy_chunked) $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/steps/08_context_parallel_cuda.o: steps/08_context_parallel/context_parallel.cu $(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $(dir $@)
	$(call quiet,NVCC)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
$(BIN)/08_context_parallel_cuda: $(BUILD)/steps/08_context_parallel_cuda.o $(BUILD)/steps/08_driver.o \
                                 $(call stage_object,05_wy_chunked) $(CUDA_RUNNER) $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(NVCC) -arch=$(CUDA_ARCH) $^ -o $@ -Xcompiler -fopenmp $(MPI_LINK_FLAGS) -lm

define gpu_rules
$(call gpu_object,$(1)): $(call gpu_source,$(1)) $$(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,NVCC)$$(NVCC) $$(NVCCFLAGS) -MMD -MP -c $$< -o $$@

$(BUILD)/main_$(1)_cuda.o: common/main.c | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,CC)$$(CC) $$(CFLAGS) -MMD -MP -DSTAGE_DESCRIPTOR=$(shell echo $(1) | sed 's/^[0-9]*_//')_cuda_stage $(if $(findstring _backward_,$(1)),-DBACKWARD_STAGE) -c $$< -o $$@

$(BIN)/$(1)_cuda: $(BUILD)/main_$(1)_cuda.o $(call gpu_object,$(1)) $(call stage_object,$(1)) $(foreach u,$(USES_$(1)),$(call stage_object,$(u))) $(CUDA_RUNNER) $(COMMON_OBJECTS)
	@mkdir -p $$(dir $$@)
	$$(call quiet,LINK)$$(NVCC) -arch=$(CUDA_ARCH) $$^ -o $$@ -Xcompiler -fopenmp -lm
endef
$(foreach s,$(GPU_STAGES),$(eval $(call gpu_rules,$(s))))

# GPU-only stages: bin/NN_name from steps/NN_name/name.cu, and the earlier stages it USES (a
# backward one, 11 on, with -DBACKWARD_STAGE: its descriptor is a gdn_backward_stage)
define gpu_only_rules
$(call stage_object,$(1)): $(call gpu_source,$(1)) $$(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,NVCC)$$(NVCC) $$(NVCCFLAGS) -MMD -MP -c $$< -o $$@

$(BUILD)/main_$(1).o: common/main.c | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,CC)$$(CC) $$(CFLAGS) -MMD -MP -DSTAGE_DESCRIPTOR=$(shell echo $(1) | sed 's/^[0-9]*_//')_stage $(if $(findstring _backward_,$(1)),-DBACKWARD_STAGE) -c $$< -o $$@

$(BIN)/$(1): $(BUILD)/main_$(1).o $(call stage_object,$(1)) $(foreach u,$(USES_$(1)),$(call stage_object,$(u))) $(CUDA_RUNNER) $(COMMON_OBJECTS)
	@mkdir -p $$(dir $$@)
	$$(call quiet,LINK)$$(NVCC) -arch=$(CUDA_ARCH) $$^ -o $$@ -Xcompiler -fopenmp -lm
endef
$(foreach s,$(GPU_ONLY_BUILT),$(eval $(call gpu_only_rules,$(s))))

# Sub-stages: a GPU-only stage taught as a series of binaries, each one idea on top of the one
# before (docs/06: 06a_tensor_cores, 06b_producer_consumer, 06c_bulk_copies, 06d_warp_chain,
# 06e_output_warps, then 06_warp_specialized;
# docs/11: 11a_backward_mma_sync, then 11_backward_tensor_cores). bin/NNx_name (x a letter) is
# built from steps/NN_*/name.cu, whose descriptor is name_stage; it links what its stage USES.
sub_stage_of    = $(shell echo $(1) | cut -c1-2)
sub_stage_name  = $(shell echo $(1) | sed 's/^[0-9]*[a-z]_//')
sub_stage_parent = $(notdir $(wildcard steps/$(call sub_stage_of,$(1))_*))
define sub_stage_rules
$(call stage_object,$(1)): steps/$(call sub_stage_parent,$(1))/$(call sub_stage_name,$(1)).cu $$(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,NVCC)$$(NVCC) $$(NVCCFLAGS) -MMD -MP -c $$< -o $$@

$(BUILD)/main_$(1).o: common/main.c | require-build
	@mkdir -p $$(dir $$@)
	$$(call quiet,CC)$$(CC) $$(CFLAGS) -MMD -MP -DSTAGE_DESCRIPTOR=$(call sub_stage_name,$(1))_stage $(if $(findstring _backward_,$(1)),-DBACKWARD_STAGE) -c $$< -o $$@

$(BIN)/$(1): $(BUILD)/main_$(1).o $(call stage_object,$(1)) $(foreach u,$(USES_$(call sub_stage_parent,$(1))),$(call stage_object,$(u))) $(CUDA_RUNNER) $(COMMON_OBJECTS)
	@mkdir -p $$(dir $$@)
	$$(call quiet,LINK)$$(NVCC) -arch=$(CUDA_ARCH) $$^ -o $$@ -Xcompiler -fopenmp -lm
endef
$(foreach s,$(SUB_STAGES),$(eval $(call sub_stage_rules,$(s))))

$(BUILD)/common/cuda_runner.o $(BUILD)/common/cuda_backward_runner.o: $(BUILD)/common/%.o: common/%.cu $(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $(dir $@)
	$(call quiet,NVCC)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/plots/%.o: plots/%.c | require-build
	@mkdir -p $(dir $@)
	$(call quiet,CC)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/plots/%.o: plots/%.cu $(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $(dir $@)
	$(call quiet,NVCC)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BIN)/fma_peak: $(BUILD)/plots/fma_peak.o $(call stage_object,05_wy_chunked) $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BIN)/gpu_peak: $(BUILD)/plots/gpu_peak.o $(CUDA_RUNNER) $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(NVCC) -arch=$(CUDA_ARCH) $^ -o $@ -Xcompiler -fopenmp -lm

$(BIN)/make_problem: $(BUILD)/plots/make_problem.o $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BIN)/precision_study: $(BUILD)/plots/precision_study.o $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BIN)/error_sources: $(BUILD)/plots/error_sources.o $(COMMON_OBJECTS)
	@mkdir -p $(dir $@)
	$(call quiet,LINK)$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%.o: tests/%.c | require-test
	@mkdir -p $(dir $@)
	$(call quiet,CC)$(CC) $(CFLAGS) -MMD -MP -DBIN_DIR='"$(BIN)"' $(shell pkg-config --cflags check 2>/dev/null) -c $< -o $@

$(TEST_RUNNER): $(TEST_OBJECTS) $(STAGE_OBJECTS) $(COMMON_OBJECTS)
	$(call quiet,LINK)$(CC) $(CFLAGS) $^ -o $@ $(shell pkg-config --libs check 2>/dev/null) $(LDLIBS)

$(BUILD)/tests/gpu/%.o: tests/gpu/%.c | require-test
	@mkdir -p $(dir $@)
	$(call quiet,CC)$(CC) $(CFLAGS) -MMD -MP $(shell pkg-config --cflags check 2>/dev/null) -c $< -o $@

$(BUILD)/tests/gpu/%.o: tests/gpu/%.cu $(NVCC_FLAGS_STAMP) | require-test
	@mkdir -p $(dir $@)
	$(call quiet,NVCC)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/run_gpu_tests: $(GPU_TEST_SOURCES:%.c=$(BUILD)/%.o) $(GPU_TEST_KERNELS:%.cu=$(BUILD)/%.o) $(BUILD)/tests/test_support.o $(GPU_OBJECTS) $(STAGE_OBJECTS) $(CUDA_RUNNER) $(COMMON_OBJECTS)
	$(call quiet,LINK)$(NVCC) -arch=$(CUDA_ARCH) $^ -o $@ -Xcompiler -fopenmp $(patsubst -pthread,-Xcompiler -pthread,$(shell pkg-config --libs check 2>/dev/null)) -lm

-include $(shell find build -name '*.d' 2>/dev/null)

# ---- run ----
# Both precisions: float is what stages ship in, double proves stage pairs agree to 1e-10.
# Then the docs' voice (tests/voice_check.sh): they say what the code does, not how it came to be.
test:
	@$(MAKE) --no-print-directory test-one PRECISION=float
	@$(MAKE) --no-print-directory test-one PRECISION=double
ifeq ($(SANITIZE)$(VALGRIND_BUILD),)
	@sh tests/python/run.sh
	@sh tests/readme_commands.sh
	@sh tests/bench_scripts.sh
endif
	@sh tests/voice_check.sh

test-one: require-test all $(TEST_RUNNER) $(GPU_TEST_RUNNER)
	@echo "== Check suites, $(PRECISION) build =="
	@$(TEST_RUNNER)
ifneq ($(GPU_TEST_RUNNER),)
	@echo "== GPU suites (CUDA, $(CUDA_ARCH)) =="
	@$(GPU_TEST_RUNNER)
endif
	@sh common/refresh_docs.sh --check

# One suite: `make check SUITE=05_wy_chunked`, in the float build (PRECISION=double: the double
# build), after rebuilding what it runs. The names are those the suites give suite_create().
CHECK_SUITES     := $(sort $(shell sed -n 's/.*suite_create("\([^"]*\)").*/\1/p' $(TEST_SOURCES)))
GPU_CHECK_SUITES := $(sort $(shell sed -n 's/.*suite_create("\([^"]*\)").*/\1/p' $(GPU_TEST_SOURCES)))
# why this build runs no GPU stage (empty where it builds them)
NO_GPU_BUILD     := $(if $(GPU_STAGES),,$(if $(HAVE_NVCC),this build ($(BUILD)) has no GPU stages: only the plain float build has,$(NVCC) not found))
CHECK_SUITE      := $(if $(filter 1,$(words $(SUITE))),$(SUITE))
ifneq ($(filter $(CHECK_SUITE),$(CHECK_SUITES)),)
check: require-test $(TEST_RUNNER) $(STAGE_BINARIES) $(MPI_BINARIES) $(TOOLS)
	@echo "== Check suite $(SUITE), $(PRECISION) build =="
	@$(TEST_RUNNER) $(SUITE)
else ifneq ($(filter $(CHECK_SUITE),$(GPU_CHECK_SUITES)),)
ifneq ($(GPU_TEST_RUNNER),)
check: require-test $(GPU_TEST_RUNNER) $(MPI_GPU_BINARIES)
	@echo "== GPU suite $(SUITE) (CUDA, $(CUDA_ARCH)) =="
	@$(GPU_TEST_RUNNER) $(SUITE)
else
check:
	@echo "error: $(SUITE) is a GPU suite, and $(NO_GPU_BUILD)" >&2
	@exit 1
endif
else
check:
	@$(if $(SUITE),echo "error: no Check suite named '$(SUITE)'" >&2;) \
	echo "usage: make check SUITE=NAME [PRECISION=double]   (one suite, rebuilt first)" >&2; \
	echo "  suites: $(CHECK_SUITES)" >&2; \
	echo "  GPU suites (float build, nvcc): $(GPU_CHECK_SUITES)" >&2; \
	exit 1
endif

# The demo builds and runs what this machine can run: the GPU stages only where a GPU answers
# (common/demo.sh find-gpu), since nvcc spends minutes on binaries that cannot run elsewhere;
# one line says what was skipped and why.
demo: require-build
	@reason="$(NO_GPU_BUILD)"; [ -n "$$reason" ] || reason=$$(sh common/demo.sh find-gpu); \
	if [ -n "$$reason" ]; then \
	    $(MAKE) --no-print-directory demo-binaries && sh common/demo.sh run $(BIN) "$$reason"; \
	else \
	    $(MAKE) --no-print-directory demo-binaries demo-gpu-binaries && sh common/demo.sh run $(BIN); \
	fi
demo-binaries: $(STAGE_BINARIES) $(MPI_BINARIES)
	@:
demo-gpu-binaries: $(GPU_BINARIES) $(GPU_ONLY_BINARIES)
	@:

bench: all
	@sh plots/bench.sh $(BIN) $(if $(QUICK),quick,full)

plots:
	@sh common/require.sh plots
	@sh plots/render.sh

# ---- the Python package (python/gdn_steps, docs/python.md) ----
# Its native library is the CPU stages (forward 01-05, backward 09 and 10) and python/library.c,
# built from the same sources as the binaries, once per precision: float64 tensors run the
# double build. Where nvcc is found, a third library runs CUDA tensors: the GPU stages that read
# bf16 (06a .. 06e, 06, 07 and the backwards 11, 12 and 13; the objects the binaries link) and python/library_cuda.cu, with the
# float build's C sources compiled position-independent. `pip install .` runs `make lib` (setup.py).
LIBRARY_STAGES  := 01_naive_loop 02_affine 03_parallel_scan 04_two_phase_scan 05_wy_chunked 09_backward_loop \
                   10_backward_chunked
LIBRARY_SOURCES := $(COMMON_SOURCES) $(foreach s,$(LIBRARY_STAGES),$(call stage_source,$(s))) python/library.c
LIBRARY_CFLAGS  ?= -O3 -march=native
CUDA_LIBRARY    := $(if $(GPU_ONLY_BUILT),python/gdn_steps/libgdn_steps_cuda.so)
LIBRARIES       := python/gdn_steps/libgdn_steps_float.so python/gdn_steps/libgdn_steps_double.so $(CUDA_LIBRARY)
lib: $(LIBRARIES)
python/gdn_steps/libgdn_steps_%.so: $(LIBRARY_SOURCES) $(wildcard common/*.h steps/*/*.h python/*.h) | require-build
	$(call quiet,CC)$(CC) $(LIBRARY_CFLAGS) -std=c11 -fopenmp -Wall -Wextra -D_POSIX_C_SOURCE=200809L \
	    $(if $(filter double,$*),-DGDN_DOUBLE) -fPIC -shared $(LIBRARY_SOURCES) -o $@ -lm
CUDA_LIBRARY_OBJECTS := $(foreach s,$(SUB_STAGES) 06_warp_specialized 07_sequence_parallel 11_backward_tensor_cores 12_backward_fused 13_backward_states,\
                          $(call stage_object,$(s))) $(CUDA_RUNNER) $(BUILD)/python/library_cuda.o \
                        $(LIBRARY_SOURCES:%.c=build/pic/%.o)
build/pic/%.o: %.c | require-build
	@mkdir -p $(dir $@)
	$(call quiet,CC)$(CC) $(LIBRARY_CFLAGS) -std=c11 -fopenmp -Wall -Wextra -D_POSIX_C_SOURCE=200809L -fPIC -MMD -MP -c $< -o $@
$(BUILD)/python/library_cuda.o: python/library_cuda.cu $(NVCC_FLAGS_STAMP) | require-build
	@mkdir -p $(dir $@)
	$(call quiet,NVCC)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
python/gdn_steps/libgdn_steps_cuda.so: $(CUDA_LIBRARY_OBJECTS)
	$(call quiet,LINK)$(NVCC) -arch=$(CUDA_ARCH) -shared $^ -o $@ -Xcompiler -fopenmp -lm
# The pytest suite (tests/python/) on the package as `pip install .` installs it; skipped, with
# the command that installs them, where python3 has no torch or pytest.
test-python:
	@sh tests/python/run.sh

# ---- robustness: fuzzing (clang's libFuzzer) and valgrind ----
FUZZ_CC    ?= clang
SECONDS    ?= 60
FUZZ_FLAGS := -g -O1 -std=c11 -fopenmp -D_POSIX_C_SOURCE=200809L -Wall -Wextra \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
build/fuzz/fuzz_npy: tests/fuzz/fuzz_npy.c common/npy.c common/error.c
	@mkdir -p $(dir $@)
	$(call quiet,FUZZ_CC)$(FUZZ_CC) $(FUZZ_FLAGS) $^ -o $@ -lm
build/fuzz/fuzz_cli: tests/fuzz/fuzz_cli.c common/cli.c common/error.c
	@mkdir -p $(dir $@)
	$(call quiet,FUZZ_CC)$(FUZZ_CC) $(FUZZ_FLAGS) $^ -o $@ -lm

# Each target runs SECONDS seconds from a copy of its committed seed corpus (tests/fuzz/corpus/);
# a crash is saved as build/fuzz/crash-* and fails the target: add it to the corpus, fix, re-run.
fuzz: build/fuzz/fuzz_npy build/fuzz/fuzz_cli
	@for target in npy cli; do \
	    mkdir -p build/fuzz/corpus_$$target && cp tests/fuzz/corpus/$$target/* build/fuzz/corpus_$$target/ && \
	    echo "== fuzz_$$target, $(SECONDS) s ==" && \
	    build/fuzz/fuzz_$$target -max_total_time=$(SECONDS) -print_final_stats=1 -close_fd_mask=3 \
	        -artifact_prefix=build/fuzz/ build/fuzz/corpus_$$target 2>&1 | \
	        grep -E 'stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY|Test unit written' || exit 1; \
	    ! ls build/fuzz/crash-* >/dev/null 2>&1 || exit 1; \
	done

# Index arithmetic past 32 bits, for real: q and k of 2^31 + 128 values each (17 GB of
# memory, about 3 minutes on 2 cores; not in CI). Stage 01 must match the fp64 oracle.
test-large: all
	$(BIN)/01_naive_loop --B 1 --T 16777217 --H 1 --K 128 --V 1 --reps 1 --check-against oracle

# valgrind memcheck on one small run of every CPU binary (a float build without -march=native,
# in bin/valgrind/): any error or definite leak fails. Stage 08 runs on 2 ranks under mpirun
# (--oversubscribe: a 1-core machine too; mpirun's own messages go to the log shown on failure),
# with Open MPI's own leaks suppressed (tests/valgrind-openmpi.supp says which, and why).
VALGRIND_RUN   := --B 2 --T 37 --H 2 --K 8 --V 12 --h0 --reps 1 --threads 2 --check-against oracle
VALGRIND_FLAGS := -q --num-callers=50 --error-exitcode=3 --leak-check=full --errors-for-leak-kinds=definite,indirect
valgrind:
	@sh common/require.sh valgrind
	@$(MAKE) --no-print-directory VALGRIND_BUILD=1 PRECISION=float $(CPU_STAGES:%=bin/valgrind/%) \
	    $(if $(HAVE_MPI),bin/valgrind/08_context_parallel)
	@for stage in $(CPU_STAGES); do \
	    valgrind $(VALGRIND_FLAGS) bin/valgrind/$$stage $(VALGRIND_RUN) > build/valgrind_$$stage.log 2>&1; \
	    status=$$?; echo "valgrind $$stage: exit $$status"; \
	    [ $$status = 0 ] || { cat build/valgrind_$$stage.log; exit 1; }; \
	done
ifneq ($(HAVE_MPI),)
	@OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 \
	    --mca btl_vader_single_copy_mechanism none valgrind $(VALGRIND_FLAGS) \
	    --suppressions=/usr/share/openmpi/openmpi-valgrind.supp --suppressions=tests/valgrind-openmpi.supp \
	    bin/valgrind/08_context_parallel --B 2 --T 150 --H 2 --K 8 --V 12 --h0 --reps 1 --threads 1 --chunk 16 \
	    > build/valgrind_08_context_parallel.log 2>&1; \
	    status=$$?; echo "valgrind 08_context_parallel (2 ranks): exit $$status"; \
	    [ $$status = 0 ] || { cat build/valgrind_08_context_parallel.log; exit 1; }
endif

diffs:
	@sh common/diffs.sh write build/diffs $(STAGES_IN_ORDER)
	@sh common/refresh_docs.sh

# stage 06 step by step, as Check's tutorial shows its money.N.c: each step a commit (from a git clone)
step-diffs:
	@sh common/diffs.sh steps build/diffs/06_steps plots/stage06_steps.list

docs: diffs

clean:
	rm -rf bin build $(LIBRARIES)
