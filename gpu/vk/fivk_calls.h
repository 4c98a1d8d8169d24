// fivk_calls.h: one-line trampolines through the dispatch tables, since Go
// cannot call a C function pointer. Each takes the table first.
#ifndef FIVK_CALLS_H
#define FIVK_CALLS_H
#include "fivk.h"

static inline VkQueue fi_get_queue(fiDevice *d, uint32_t family) {
	VkQueue q = NULL;
	d->vkGetDeviceQueue(d->h, family, 0, &q);
	return q;
}
static inline VkResult fi_device_wait_idle(fiDevice *d) { return d->vkDeviceWaitIdle(d->h); }
static inline VkResult fi_queue_wait_idle(fiDevice *d, VkQueue q) { return d->vkQueueWaitIdle(q); }

// fi_create_buffer shares the buffer between the compute and transfer
// queue families when they differ (no ownership-transfer barriers needed).
static inline VkResult fi_create_buffer(fiDevice *d, VkDeviceSize size, VkBufferUsageFlags usage, uint32_t fam0, uint32_t fam1, VkBuffer *b) {
	uint32_t fams[2] = {fam0, fam1};
	VkBufferCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size, .usage = usage,
		.sharingMode = fam0 == fam1 ? VK_SHARING_MODE_EXCLUSIVE : VK_SHARING_MODE_CONCURRENT,
		.queueFamilyIndexCount = fam0 == fam1 ? 0 : 2, .pQueueFamilyIndices = fam0 == fam1 ? NULL : fams};
	return d->vkCreateBuffer(d->h, &ci, NULL, b);
}
static inline void fi_destroy_buffer(fiDevice *d, VkBuffer b) { d->vkDestroyBuffer(d->h, b, NULL); }
static inline void fi_buffer_reqs(fiDevice *d, VkBuffer b, VkMemoryRequirements *r) { d->vkGetBufferMemoryRequirements(d->h, b, r); }
static inline VkResult fi_allocate_memory(fiDevice *d, VkDeviceSize size, uint32_t type, VkDeviceMemory *m) {
	VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = size, .memoryTypeIndex = type};
	return d->vkAllocateMemory(d->h, &ai, NULL, m);
}
static inline void fi_free_memory(fiDevice *d, VkDeviceMemory m) { d->vkFreeMemory(d->h, m, NULL); }
static inline VkResult fi_bind_buffer_memory(fiDevice *d, VkBuffer b, VkDeviceMemory m, VkDeviceSize off) { return d->vkBindBufferMemory(d->h, b, m, off); }
static inline VkResult fi_map_memory(fiDevice *d, VkDeviceMemory m, void **p) { return d->vkMapMemory(d->h, m, 0, VK_WHOLE_SIZE, 0, p); }
static inline void fi_unmap_memory(fiDevice *d, VkDeviceMemory m) { d->vkUnmapMemory(d->h, m); }
static inline VkResult fi_flush(fiDevice *d, VkDeviceMemory m, VkDeviceSize off, VkDeviceSize size) {
	VkMappedMemoryRange r = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = m, .offset = off, .size = size};
	return d->vkFlushMappedMemoryRanges(d->h, 1, &r);
}
static inline VkResult fi_invalidate(fiDevice *d, VkDeviceMemory m, VkDeviceSize off, VkDeviceSize size) {
	VkMappedMemoryRange r = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = m, .offset = off, .size = size};
	return d->vkInvalidateMappedMemoryRanges(d->h, 1, &r);
}

static inline void fi_destroy_pipeline(fiDevice *d, VkDescriptorSetLayout dsl, VkPipelineLayout pl, VkPipeline p) {
	if (p) d->vkDestroyPipeline(d->h, p, NULL);
	if (pl) d->vkDestroyPipelineLayout(d->h, pl, NULL);
	if (dsl) d->vkDestroyDescriptorSetLayout(d->h, dsl, NULL);
}
static inline VkResult fi_create_descriptor_pool(fiDevice *d, uint32_t maxSets, uint32_t nBuffers, VkDescriptorPool *p) {
	VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = nBuffers};
	VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = maxSets, .poolSizeCount = 1, .pPoolSizes = &ps};
	return d->vkCreateDescriptorPool(d->h, &ci, NULL, p);
}
static inline void fi_destroy_descriptor_pool(fiDevice *d, VkDescriptorPool p) { d->vkDestroyDescriptorPool(d->h, p, NULL); }

static inline VkResult fi_create_command_pool(fiDevice *d, uint32_t family, VkCommandPool *p) {
	VkCommandPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = family};
	return d->vkCreateCommandPool(d->h, &ci, NULL, p);
}
static inline void fi_destroy_command_pool(fiDevice *d, VkCommandPool p) { d->vkDestroyCommandPool(d->h, p, NULL); }
static inline VkResult fi_allocate_command_buffer(fiDevice *d, VkCommandPool p, VkCommandBuffer *cb) {
	VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = p, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
	return d->vkAllocateCommandBuffers(d->h, &ai, cb);
}
static inline void fi_free_command_buffer(fiDevice *d, VkCommandPool p, VkCommandBuffer cb) { d->vkFreeCommandBuffers(d->h, p, 1, &cb); }
static inline VkResult fi_begin(fiDevice *d, VkCommandBuffer cb) {
	// No ONE_TIME_SUBMIT flag: a recorded buffer is replayed many times.
	VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
	return d->vkBeginCommandBuffer(cb, &bi);
}
static inline VkResult fi_end(fiDevice *d, VkCommandBuffer cb) { return d->vkEndCommandBuffer(cb); }
static inline void fi_cmd_bind_compute(fiDevice *d, VkCommandBuffer cb, VkPipeline p, VkPipelineLayout pl, VkDescriptorSet set) {
	d->vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
	d->vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &set, 0, NULL);
}
static inline void fi_cmd_push(fiDevice *d, VkCommandBuffer cb, VkPipelineLayout pl, uint32_t size, const void *data) {
	d->vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, size, data);
}
static inline void fi_cmd_dispatch(fiDevice *d, VkCommandBuffer cb, uint32_t x, uint32_t y, uint32_t z) { d->vkCmdDispatch(cb, x, y, z); }
static inline void fi_cmd_copy(fiDevice *d, VkCommandBuffer cb, VkBuffer src, VkDeviceSize srcOff, VkBuffer dst, VkDeviceSize dstOff, VkDeviceSize size) {
	VkBufferCopy c = {.srcOffset = srcOff, .dstOffset = dstOff, .size = size};
	d->vkCmdCopyBuffer(cb, src, dst, 1, &c);
}
static inline void fi_cmd_timestamp(fiDevice *d, VkCommandBuffer cb, VkQueryPool p, uint32_t q) {
	d->vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, p, q);
}
static inline void fi_cmd_reset_queries(fiDevice *d, VkCommandBuffer cb, VkQueryPool p, uint32_t first, uint32_t n) { d->vkCmdResetQueryPool(cb, p, first, n); }
static inline VkResult fi_create_query_pool(fiDevice *d, uint32_t n, VkQueryPool *p) {
	VkQueryPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = n};
	return d->vkCreateQueryPool(d->h, &ci, NULL, p);
}
static inline void fi_destroy_query_pool(fiDevice *d, VkQueryPool p) { d->vkDestroyQueryPool(d->h, p, NULL); }
static inline VkResult fi_query_results(fiDevice *d, VkQueryPool p, uint32_t first, uint32_t n, uint64_t *out) {
	return d->vkGetQueryPoolResults(d->h, p, first, n, 8 * n, out, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
}
static inline VkResult fi_create_fence(fiDevice *d, VkFence *f) {
	VkFenceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	return d->vkCreateFence(d->h, &ci, NULL, f);
}
static inline void fi_destroy_fence(fiDevice *d, VkFence f) { d->vkDestroyFence(d->h, f, NULL); }
static inline VkResult fi_wait_fence(fiDevice *d, VkFence f, uint64_t timeoutNs) { return d->vkWaitForFences(d->h, 1, &f, VK_TRUE, timeoutNs); }
static inline VkResult fi_reset_fence(fiDevice *d, VkFence f) { return d->vkResetFences(d->h, 1, &f); }
static inline void fi_destroy_semaphore(fiDevice *d, VkSemaphore s) { d->vkDestroySemaphore(d->h, s, NULL); }
static inline VkResult fi_semaphore_value(fiDevice *d, VkSemaphore s, uint64_t *v) { return d->vkGetSemaphoreCounterValue(d->h, s, v); }
#endif
