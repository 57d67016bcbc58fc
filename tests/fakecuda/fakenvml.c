/*
 * fakenvml: a test double of NVML (libnvidia-ml.so.1), the companion of fakecuda.
 *
 * Programs and interposers ask NVML, not the driver, how much memory a GPU has. On machines
 * without a GPU this fake answers from fakecuda's configuration, read with the same parser
 * (fakecuda_env.h): FAKECUDA_DEVICES devices (0 with FAKECUDA_NO_DEVICE=1) of FAKECUDA_MEM
 * bytes each, all of it free (used = 0, reserved = 0). It is a separate library and does
 * not see fakecuda's allocations; what a test checks is the total, and that an interposer
 * rewrites these numbers.
 *
 * The CUDA toolkit here ships no nvml.h, so the few types of the ABI are declared below as
 * nvml.h defines them: nvmlReturn_t values, nvmlMemory_t, nvmlMemory_v2_t and its version
 * word (NVML_STRUCT_VERSION(Memory, 2): the struct size | 2 << 24). Exported names are the
 * versioned ones nvml.h's macros resolve to (nvmlInit -> nvmlInit_v2, ...). Initialization
 * is reference-counted as in NVML; configuration is read on the first nvmlInit_v2, and a
 * malformed variable makes it fail with NVML_ERROR_UNKNOWN (message on stderr).
 */
#include <pthread.h>

#include "fakecuda_env.h"

#define FN_MAX_DEV 16

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

/* The exports, declared so that their signatures are checked against these types. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
const char *nvmlErrorString(nvmlReturn_t result);

struct nvmlDevice_st {
    unsigned index;
};

static struct {
    unsigned long long devices, mem, no_device;
    int bad;
} cfg;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_inits; /* nvmlInit_v2 calls not yet matched by nvmlShutdown */
static struct nvmlDevice_st g_dev[FN_MAX_DEV];

static void load_config(void)
{
    cfg.devices = 1;
    cfg.mem = 1ull << 30;
    cfg.bad |= fk_env_num("fakenvml", "FAKECUDA_DEVICES", &cfg.devices, FN_MAX_DEV) != 0;
    cfg.bad |= fk_env_num("fakenvml", "FAKECUDA_MEM", &cfg.mem, ULLONG_MAX) != 0;
    cfg.bad |= fk_env_num("fakenvml", "FAKECUDA_NO_DEVICE", &cfg.no_device, 1) != 0;
    if (cfg.no_device) cfg.devices = 0;
    for (unsigned i = 0; i < FN_MAX_DEV; i++) g_dev[i].index = i;
}

/* Runs `body` under the lock once NVML is initialized. */
#define FN_CALL(body)                                                                          \
    {                                                                                          \
        pthread_mutex_lock(&g_lock);                                                           \
        nvmlReturn_t rc_ = g_inits ? (body) : NVML_ERROR_UNINITIALIZED;                        \
        pthread_mutex_unlock(&g_lock);                                                         \
        return rc_;                                                                            \
    }

static int device_ok(nvmlDevice_t d)
{
    for (unsigned long long i = 0; i < cfg.devices; i++)
        if (d == &g_dev[i]) return 1;
    return 0;
}

static nvmlReturn_t shutdown_one(void)
{
    g_inits--;
    return NVML_SUCCESS;
}

static nvmlReturn_t get_count(unsigned *count)
{
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)cfg.devices;
    return NVML_SUCCESS;
}

static nvmlReturn_t get_handle(unsigned index, nvmlDevice_t *device)
{
    if (!device || index >= cfg.devices) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_dev[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_info(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (!m || !device_ok(d)) return NVML_ERROR_INVALID_ARGUMENT;
    *m = (nvmlMemory_t){.total = cfg.mem, .free = cfg.mem, .used = 0};
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_info_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    if (!m || !device_ok(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    *m = (nvmlMemory_v2_t){
        .version = nvmlMemory_v2, .total = cfg.mem, .reserved = 0, .free = cfg.mem, .used = 0};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void)
{
    pthread_once(&g_once, load_config);
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t rc = cfg.bad ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
    if (!rc) g_inits++;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

nvmlReturn_t nvmlShutdown(void) FN_CALL(shutdown_one())
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) FN_CALL(get_count(deviceCount))
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
    FN_CALL(get_handle(index, device))
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
    FN_CALL(memory_info(device, memory))
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
    FN_CALL(memory_info_v2(device, memory))

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}
