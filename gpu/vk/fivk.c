//go:build cgo

// fivk.c: run-time loading of the Vulkan loader and the few calls whose
// structs chain through pNext or point at arrays (built here in C memory so
// Go never hands C a struct holding Go pointers).
#include "fivk.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fi_load(const char *name, fiLoader *l, char *err, int errlen) {
	memset(l, 0, sizeof *l);
	l->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!l->lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	l->vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(l->lib, "vkGetInstanceProcAddr");
	if (!l->vkGetInstanceProcAddr) {
		snprintf(err, errlen, "%s has no vkGetInstanceProcAddr", name);
		dlclose(l->lib);
		l->lib = NULL;
		return -1;
	}
#define FI_LOAD_GLOBAL(fn) l->fn = (PFN_##fn)l->vkGetInstanceProcAddr(NULL, #fn);
	FI_GLOBAL_FUNCS(FI_LOAD_GLOBAL)
#undef FI_LOAD_GLOBAL
	if (!l->vkCreateInstance) {
		snprintf(err, errlen, "%s: vkGetInstanceProcAddr gives no vkCreateInstance", name);
		dlclose(l->lib);
		l->lib = NULL;
		return -1;
	}
	return 0;
}

void fi_unload(fiLoader *l) {
	if (l->lib) dlclose(l->lib);
	l->lib = NULL;
}

int fi_has_layer(fiLoader *l, const char *name) {
	uint32_t n = 0;
	if (!l->vkEnumerateInstanceLayerProperties) return 0;
	if (l->vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkLayerProperties *p = calloc(n, sizeof *p);
	if (!p) return 0;
	int found = 0;
	if (l->vkEnumerateInstanceLayerProperties(&n, p) >= 0) {
		for (uint32_t i = 0; i < n; i++) {
			if (strcmp(p[i].layerName, name) == 0) found = 1;
		}
	}
	free(p);
	return found;
}

VkResult fi_create_instance(fiLoader *l, fiInstance *in, uint32_t apiVersion, const char *appName, int validation) {
	memset(in, 0, sizeof *in);
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = appName,
		.pEngineName = "flowinfer",
		.apiVersion = apiVersion,
	};
	const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
		.enabledLayerCount = validation ? 1 : 0,
		.ppEnabledLayerNames = validation ? layers : NULL,
	};
	VkResult r = l->vkCreateInstance(&ci, NULL, &in->h);
	if (r != VK_SUCCESS) return r;
	in->apiVersion = apiVersion;
#define FI_LOAD_INSTANCE(fn) in->fn = (PFN_##fn)l->vkGetInstanceProcAddr(in->h, #fn);
	FI_INSTANCE_FUNCS(FI_LOAD_INSTANCE)
#undef FI_LOAD_INSTANCE
	return VK_SUCCESS;
}

void fi_destroy_instance(fiInstance *in) {
	if (in->h && in->vkDestroyInstance) in->vkDestroyInstance(in->h, NULL);
	in->h = NULL;
}

VkResult fi_physical_devices(fiInstance *in, uint32_t *n, VkPhysicalDevice *out) {
	return in->vkEnumeratePhysicalDevices(in->h, n, out);
}

void fi_props(fiInstance *in, VkPhysicalDevice pd, fiProps *out) {
	memset(out, 0, sizeof *out);
	uint32_t devAPI = 0;
	in->vkGetPhysicalDeviceProperties(pd, &out->p);
	devAPI = out->p.apiVersion;
	uint32_t api = devAPI < in->apiVersion ? devAPI : in->apiVersion;
	if (in->vkGetPhysicalDeviceProperties2 && api >= VK_API_VERSION_1_2) {
		VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
		VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &drv};
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
		in->vkGetPhysicalDeviceProperties2(pd, &p2);
		out->subgroupSize = sg.subgroupSize;
		out->hasDriverProps = 1;
		out->driverID = drv.driverID;
		memcpy(out->driverName, drv.driverName, sizeof out->driverName);
		memcpy(out->driverInfo, drv.driverInfo, sizeof out->driverInfo);
	} else if (in->vkGetPhysicalDeviceProperties2 && api >= VK_API_VERSION_1_1) {
		VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
		in->vkGetPhysicalDeviceProperties2(pd, &p2);
		out->subgroupSize = sg.subgroupSize;
	}
	if (in->vkGetPhysicalDeviceFeatures2 && api >= VK_API_VERSION_1_2) {
		VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
		VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
		in->vkGetPhysicalDeviceFeatures2(pd, &f2);
		out->timelineSemaphore = f12.timelineSemaphore;
		out->hostQueryReset = f12.hostQueryReset;
	}
	in->vkGetPhysicalDeviceMemoryProperties(pd, &out->mem);
	uint32_t nq = 0;
	in->vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
	if (nq > 16) nq = 16;
	in->vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, out->queueFamilies);
	out->nQueueFamilies = nq;
}

VkResult fi_create_device(fiInstance *in, VkPhysicalDevice pd, fiDevice *d, uint32_t computeFamily, uint32_t transferFamily, int timeline) {
	memset(d, 0, sizeof *d);
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qi[2] = {
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = computeFamily, .queueCount = 1, .pQueuePriorities = &prio},
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = transferFamily, .queueCount = 1, .pQueuePriorities = &prio},
	};
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
		.timelineSemaphore = timeline ? VK_TRUE : VK_FALSE,
	};
	VkDeviceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.pNext = timeline ? &f12 : NULL,
		.queueCreateInfoCount = transferFamily == computeFamily ? 1 : 2,
		.pQueueCreateInfos = qi,
	};
	VkResult r = in->vkCreateDevice(pd, &ci, NULL, &d->h);
	if (r != VK_SUCCESS) return r;
#define FI_LOAD_DEVICE(fn) d->fn = (PFN_##fn)in->vkGetDeviceProcAddr(d->h, #fn);
	FI_DEVICE_FUNCS(FI_LOAD_DEVICE)
#undef FI_LOAD_DEVICE
	return VK_SUCCESS;
}

// fi_missing_device_func names the first Vulkan 1.0 device function the
// driver did not give, or returns NULL.
const char *fi_missing_device_func(fiDevice *d) {
#define FI_CHECK(fn) if (!d->fn) return #fn;
	FI_DEVICE_FUNCS_10(FI_CHECK)
#undef FI_CHECK
	return NULL;
}

void fi_destroy_device(fiDevice *d) {
	if (d->h && d->vkDestroyDevice) d->vkDestroyDevice(d->h, NULL);
	d->h = NULL;
}

VkResult fi_submit(fiDevice *d, VkQueue q, VkCommandBuffer cb,
	uint32_t nWait, const VkSemaphore *waitSems, const uint64_t *waitValues,
	uint32_t nSignal, const VkSemaphore *signalSems, const uint64_t *signalValues,
	VkFence fence) {
	VkPipelineStageFlags stages[8];
	if (nWait > 8) return VK_ERROR_UNKNOWN;
	for (uint32_t i = 0; i < nWait; i++) stages[i] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
	VkTimelineSemaphoreSubmitInfo ti = {
		.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
		.waitSemaphoreValueCount = nWait,
		.pWaitSemaphoreValues = waitValues,
		.signalSemaphoreValueCount = nSignal,
		.pSignalSemaphoreValues = signalValues,
	};
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.pNext = (nWait || nSignal) ? &ti : NULL,
		.waitSemaphoreCount = nWait,
		.pWaitSemaphores = waitSems,
		.pWaitDstStageMask = stages,
		.commandBufferCount = cb ? 1 : 0,
		.pCommandBuffers = &cb,
		.signalSemaphoreCount = nSignal,
		.pSignalSemaphores = signalSems,
	};
	return d->vkQueueSubmit(q, 1, &si, fence);
}

VkResult fi_create_compute_pipeline(fiDevice *d, const uint32_t *code, size_t codeBytes,
	uint32_t nBindings, uint32_t pushBytes, const uint32_t *spec, uint32_t nSpec,
	VkDescriptorSetLayout *dsl, VkPipelineLayout *pl, VkPipeline *pipe) {
	*dsl = VK_NULL_HANDLE;
	*pl = VK_NULL_HANDLE;
	*pipe = VK_NULL_HANDLE;
	if (nBindings > 16 || nSpec > 16) return VK_ERROR_UNKNOWN;
	VkDescriptorSetLayoutBinding b[16];
	for (uint32_t i = 0; i < nBindings; i++) {
		b[i] = (VkDescriptorSetLayoutBinding){
			.binding = i,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.descriptorCount = 1,
			.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		};
	}
	VkDescriptorSetLayoutCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.bindingCount = nBindings,
		.pBindings = b,
	};
	VkResult r = d->vkCreateDescriptorSetLayout(d->h, &dci, NULL, dsl);
	if (r != VK_SUCCESS) return r;
	VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = pushBytes};
	VkPipelineLayoutCreateInfo plci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1,
		.pSetLayouts = dsl,
		.pushConstantRangeCount = pushBytes ? 1 : 0,
		.pPushConstantRanges = pushBytes ? &pcr : NULL,
	};
	r = d->vkCreatePipelineLayout(d->h, &plci, NULL, pl);
	if (r != VK_SUCCESS) return r;
	VkShaderModuleCreateInfo smci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = codeBytes,
		.pCode = code,
	};
	VkShaderModule mod;
	r = d->vkCreateShaderModule(d->h, &smci, NULL, &mod);
	if (r != VK_SUCCESS) return r;
	VkSpecializationMapEntry me[16];
	for (uint32_t i = 0; i < nSpec; i++) {
		me[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
	}
	VkSpecializationInfo si = {.mapEntryCount = nSpec, .pMapEntries = me, .dataSize = 4 * nSpec, .pData = spec};
	VkComputePipelineCreateInfo cci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.module = mod,
			.pName = "main",
			.pSpecializationInfo = nSpec ? &si : NULL,
		},
		.layout = *pl,
	};
	r = d->vkCreateComputePipelines(d->h, VK_NULL_HANDLE, 1, &cci, NULL, pipe);
	d->vkDestroyShaderModule(d->h, mod, NULL);
	return r;
}

VkResult fi_alloc_descriptor_set(fiDevice *d, VkDescriptorPool pool, VkDescriptorSetLayout dsl, VkDescriptorSet *set) {
	VkDescriptorSetAllocateInfo ai = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
		.descriptorPool = pool,
		.descriptorSetCount = 1,
		.pSetLayouts = &dsl,
	};
	return d->vkAllocateDescriptorSets(d->h, &ai, set);
}

void fi_write_storage_buffers(fiDevice *d, VkDescriptorSet set, uint32_t n, const VkBuffer *bufs, const VkDeviceSize *offs, const VkDeviceSize *ranges) {
	VkDescriptorBufferInfo bi[16];
	VkWriteDescriptorSet w[16];
	if (n > 16) n = 16;
	for (uint32_t i = 0; i < n; i++) {
		bi[i] = (VkDescriptorBufferInfo){.buffer = bufs[i], .offset = offs[i], .range = ranges[i]};
		w[i] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
			.dstSet = set,
			.dstBinding = i,
			.descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.pBufferInfo = &bi[i],
		};
	}
	d->vkUpdateDescriptorSets(d->h, n, w, 0, NULL);
}

void fi_cmd_barrier(fiDevice *d, VkCommandBuffer cb, VkPipelineStageFlags src, VkPipelineStageFlags dst, VkAccessFlags srcAccess, VkAccessFlags dstAccess) {
	VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = srcAccess, .dstAccessMask = dstAccess};
	d->vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

void fi_cmd_buffer_barrier(fiDevice *d, VkCommandBuffer cb, VkPipelineStageFlags src, VkPipelineStageFlags dst, VkAccessFlags srcAccess, VkAccessFlags dstAccess,
	uint32_t srcFamily, uint32_t dstFamily, VkBuffer buf, VkDeviceSize off, VkDeviceSize size) {
	VkBufferMemoryBarrier bb = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
		.srcAccessMask = srcAccess,
		.dstAccessMask = dstAccess,
		.srcQueueFamilyIndex = srcFamily,
		.dstQueueFamilyIndex = dstFamily,
		.buffer = buf,
		.offset = off,
		.size = size,
	};
	d->vkCmdPipelineBarrier(cb, src, dst, 0, 0, NULL, 1, &bb, 0, NULL);
}

VkResult fi_wait_semaphore(fiDevice *d, VkSemaphore s, uint64_t value, uint64_t timeoutNs) {
	VkSemaphoreWaitInfo wi = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
		.semaphoreCount = 1,
		.pSemaphores = &s,
		.pValues = &value,
	};
	return d->vkWaitSemaphores(d->h, &wi, timeoutNs);
}

VkResult fi_create_timeline(fiDevice *d, uint64_t initial, VkSemaphore *s) {
	VkSemaphoreTypeCreateInfo ti = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
		.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
		.initialValue = initial,
	};
	VkSemaphoreCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
	return d->vkCreateSemaphore(d->h, &ci, NULL, s);
}
