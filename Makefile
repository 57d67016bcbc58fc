# Thin wrapper over CMake. The two commands of the README:
#   make run   installs what is missing to build and run the demo (not what only the tests
#              and the distributed mode use: Open MPI, NumPy...), builds, runs the default job
#   make test  installs everything missing, builds and runs every test: a plain build, then
#              AddressSanitizer+UBSan and ThreadSanitizer builds
JOBS ?= $(shell nproc)
# Tests two to a core: a test spends part of its time waiting (process starts, MPI's
# start-up, threads handing work over), which another fills. On the 2-core CI VM the three
# builds' tests took 485-523 s at -j4 against 600-650 at -j2 (docs/perf/tests.md).
TEST_JOBS ?= $(shell echo $$(( 2 * $(JOBS) )))
CMAKE_FLAGS ?=

.PHONY: all deps deps-run build run test bench install clean

all: build

deps:
	@bash scripts/install-deps.sh

deps-run:
	@bash scripts/install-deps.sh --run

# Ninja where it is installed (scripts/install-deps.sh says why), for a build folder not
# configured yet: one configured before keeps its generator (CMake refuses to change it).
# (Asked when the recipe runs: the deps target may just have installed it.)
generator = $$(test -f $(1)/CMakeCache.txt || ! command -v ninja >/dev/null || echo "-G Ninja")

# The plain build, after whichever deps target asked for it.
define configure_and_build
	@cmake -S . -B build $(call generator,build) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j$(JOBS)
endef

build: deps
	$(configure_and_build)

# The default job: a tiny Qwen3-MoE-shaped model (random weights, trained vocabulary) made
# once, then generated from, every expert read through the virtual expert address space.
DEFAULT_MODEL = build/tiny-qwen3moe-f32.gguf

run: deps-run
	$(configure_and_build)
	@test -f $(DEFAULT_MODEL) || ./build/moevm mkmodel --preset tiny --arch qwen3moe -o $(DEFAULT_MODEL)
	./build/moevm run -m $(DEFAULT_MODEL) -p "Once upon a time" -n 48 --seed 1

# One build directory per sanitizer set. The ASan+UBSan build runs every test it registers,
# and the plain build the others (scripts/asan_covered.sh: a test done twice checked nothing
# more the second time) and the kernels' bit-for-bit tests. The sanitizer builds take
# the plain build's PTX from build/ptx-cache and its fake driver's kernel plugin (neither
# depends on sanitizers). The three are configured at once: a configuration is 7 s of one
# core's work (the compilers', CUDA's and Python's checks), which left the other idle.
TEST_BUILDS = "build:" "build-asan:address,undefined" "build-tsan:thread"
test: deps
	@set -e; pids=; for cfg in $(TEST_BUILDS); do \
	  dir=$${cfg%%:*}; san=$${cfg#*:}; \
	  cmake -S . -B $$dir $(call generator,$$dir) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DMOEVM_SANITIZE=$$san \
	    -DMOEVM_PTX_CACHE=$(CURDIR)/build/ptx-cache -DMOEVM_PLAIN_BUILD=$(CURDIR)/build \
	    $(CMAKE_FLAGS) >/dev/null & pids="$$pids $$!"; \
	done; for p in $$pids; do wait $$p; done; \
	for cfg in $(TEST_BUILDS); do \
	  dir=$${cfg%%:*}; san=$${cfg#*:}; \
	  skip=$$(test -n "$$san" || scripts/asan_covered.sh build-asan); \
	  echo "== $$dir $${san:+(sanitizers: $$san)}$${skip:+ (the tests build-asan runs too: there)}"; \
	  cmake --build $$dir -j$(JOBS); \
	  ctest --test-dir $$dir --output-on-failure -j$(TEST_JOBS) $${skip:+-E "$$skip"}; \
	  scripts/skip_summary.sh $$dir/Testing/Temporary/LastTest.log; \
	done

# The CLI, libmoevm (both APIs), its headers and pkg-config file, under PREFIX (DESTDIR for a
# staged install): `pkg-config --cflags --libs moevm` then builds an application on it.
PREFIX ?= /usr/local
install: build
	@cmake --install build --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-tsan build-gpu
