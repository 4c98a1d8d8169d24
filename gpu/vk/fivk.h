// fivk.h: the Vulkan compute subset flowinfer calls, loaded at run time.
//
// No function is linked: fi_load dlopens the loader, takes
// vkGetInstanceProcAddr from it and fills dispatch tables the way volk does
// (global functions, then instance functions through
// vkGetInstanceProcAddr(instance), then device functions through
// vkGetDeviceProcAddr(device), which skips the loader's trampoline). A
// function the driver does not expose stays NULL; callers check before use.
#ifndef FIVK_H
#define FIVK_H

// Non-dispatchable handles as uint64_t rather than pointers to opaque
// structs: some drivers hand out small integers, which Go's garbage
// collector must never see in a pointer-typed slot.
#define VK_USE_64_BIT_PTR_DEFINES 0
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#define FI_GLOBAL_FUNCS(X) \
	X(vkCreateInstance) \
	X(vkEnumerateInstanceVersion) \
	X(vkEnumerateInstanceLayerProperties)

#define FI_INSTANCE_FUNCS(X) \
	X(vkDestroyInstance) \
	X(vkEnumeratePhysicalDevices) \
	X(vkGetPhysicalDeviceProperties) \
	X(vkGetPhysicalDeviceProperties2) \
	X(vkGetPhysicalDeviceMemoryProperties) \
	X(vkGetPhysicalDeviceQueueFamilyProperties) \
	X(vkGetPhysicalDeviceFeatures2) \
	X(vkCreateDevice) \
	X(vkGetDeviceProcAddr)

// FI_DEVICE_FUNCS are Vulkan 1.0 core; FI_DEVICE_FUNCS_12 are 1.2 core
// (timeline semaphores) and may be NULL on older drivers.
#define FI_DEVICE_FUNCS(X) \
	FI_DEVICE_FUNCS_10(X) \
	FI_DEVICE_FUNCS_12(X)

#define FI_DEVICE_FUNCS_12(X) \
	X(vkWaitSemaphores) \
	X(vkGetSemaphoreCounterValue)

#define FI_DEVICE_FUNCS_10(X) \
	X(vkDestroyDevice) \
	X(vkGetDeviceQueue) \
	X(vkDeviceWaitIdle) \
	X(vkQueueSubmit) \
	X(vkQueueWaitIdle) \
	X(vkCreateBuffer) \
	X(vkDestroyBuffer) \
	X(vkGetBufferMemoryRequirements) \
	X(vkAllocateMemory) \
	X(vkFreeMemory) \
	X(vkBindBufferMemory) \
	X(vkMapMemory) \
	X(vkUnmapMemory) \
	X(vkFlushMappedMemoryRanges) \
	X(vkInvalidateMappedMemoryRanges) \
	X(vkCreateShaderModule) \
	X(vkDestroyShaderModule) \
	X(vkCreateDescriptorSetLayout) \
	X(vkDestroyDescriptorSetLayout) \
	X(vkCreatePipelineLayout) \
	X(vkDestroyPipelineLayout) \
	X(vkCreateComputePipelines) \
	X(vkDestroyPipeline) \
	X(vkCreateDescriptorPool) \
	X(vkDestroyDescriptorPool) \
	X(vkAllocateDescriptorSets) \
	X(vkUpdateDescriptorSets) \
	X(vkCreateCommandPool) \
	X(vkDestroyCommandPool) \
	X(vkAllocateCommandBuffers) \
	X(vkFreeCommandBuffers) \
	X(vkBeginCommandBuffer) \
	X(vkEndCommandBuffer) \
	X(vkCmdBindPipeline) \
	X(vkCmdBindDescriptorSets) \
	X(vkCmdPushConstants) \
	X(vkCmdDispatch) \
	X(vkCmdPipelineBarrier) \
	X(vkCmdCopyBuffer) \
	X(vkCmdWriteTimestamp) \
	X(vkCmdResetQueryPool) \
	X(vkCreateQueryPool) \
	X(vkDestroyQueryPool) \
	X(vkGetQueryPoolResults) \
	X(vkCreateFence) \
	X(vkDestroyFence) \
	X(vkWaitForFences) \
	X(vkResetFences) \
	X(vkCreateSemaphore) \
	X(vkDestroySemaphore)

#define FI_DECL(name) PFN_##name name;

typedef struct fiLoader {
	void *lib;
	PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
	FI_GLOBAL_FUNCS(FI_DECL)
} fiLoader;

typedef struct fiInstance {
	VkInstance h;
	uint32_t apiVersion;
	FI_INSTANCE_FUNCS(FI_DECL)
} fiInstance;

typedef struct fiDevice {
	VkDevice h;
	FI_DEVICE_FUNCS(FI_DECL)
} fiDevice;

// fiProps is what flowinfer reports about a physical device, gathered in C
// because the Vulkan 1.1/1.2 property structs chain through pNext.
typedef struct fiProps {
	VkPhysicalDeviceProperties p;
	VkPhysicalDeviceMemoryProperties mem;
	uint32_t subgroupSize;    // 0: not reported (Vulkan 1.0)
	uint32_t hasDriverProps;  // driverName/driverInfo below are valid
	VkDriverId driverID;
	char driverName[VK_MAX_DRIVER_NAME_SIZE];
	char driverInfo[VK_MAX_DRIVER_INFO_SIZE];
	uint32_t timelineSemaphore; // VkPhysicalDeviceVulkan12Features.timelineSemaphore
	uint32_t hostQueryReset;
	uint32_t nQueueFamilies;
	VkQueueFamilyProperties queueFamilies[16];
} fiProps;

int fi_load(const char *name, fiLoader *l, char *err, int errlen);
void fi_unload(fiLoader *l);
VkResult fi_create_instance(fiLoader *l, fiInstance *in, uint32_t apiVersion, const char *appName, int validation);
void fi_destroy_instance(fiInstance *in);
VkResult fi_physical_devices(fiInstance *in, uint32_t *n, VkPhysicalDevice *out);
void fi_props(fiInstance *in, VkPhysicalDevice pd, fiProps *out);
int fi_has_layer(fiLoader *l, const char *name);
VkResult fi_create_device(fiInstance *in, VkPhysicalDevice pd, fiDevice *d, uint32_t computeFamily, uint32_t transferFamily, int timeline);
void fi_destroy_device(fiDevice *d);
const char *fi_missing_device_func(fiDevice *d);
VkResult fi_submit(fiDevice *d, VkQueue q, VkCommandBuffer cb,
	uint32_t nWait, const VkSemaphore *waitSems, const uint64_t *waitValues,
	uint32_t nSignal, const VkSemaphore *signalSems, const uint64_t *signalValues,
	VkFence fence);
VkResult fi_create_compute_pipeline(fiDevice *d, const uint32_t *code, size_t codeBytes,
	uint32_t nBindings, uint32_t pushBytes, const uint32_t *spec, uint32_t nSpec,
	VkDescriptorSetLayout *dsl, VkPipelineLayout *pl, VkPipeline *pipe);
VkResult fi_alloc_descriptor_set(fiDevice *d, VkDescriptorPool pool, VkDescriptorSetLayout dsl, VkDescriptorSet *set);
void fi_write_storage_buffers(fiDevice *d, VkDescriptorSet set, uint32_t n, const VkBuffer *bufs, const VkDeviceSize *offs, const VkDeviceSize *ranges);
void fi_cmd_barrier(fiDevice *d, VkCommandBuffer cb, VkPipelineStageFlags src, VkPipelineStageFlags dst, VkAccessFlags srcAccess, VkAccessFlags dstAccess);
void fi_cmd_buffer_barrier(fiDevice *d, VkCommandBuffer cb, VkPipelineStageFlags src, VkPipelineStageFlags dst, VkAccessFlags srcAccess, VkAccessFlags dstAccess,
	uint32_t srcFamily, uint32_t dstFamily, VkBuffer buf, VkDeviceSize off, VkDeviceSize size);
VkResult fi_wait_semaphore(fiDevice *d, VkSemaphore s, uint64_t value, uint64_t timeoutNs);
VkResult fi_create_timeline(fiDevice *d, uint64_t initial, VkSemaphore *s);

#endif
