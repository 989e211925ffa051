// A stand-in for libcuda whose functions return at once: with it, the host's own work in a
// kernel call can be counted (bench/host-instructions.sh) on a machine without a GPU.
// Device memory is host memory; launches do nothing. Built as libcuda.so only: NVRTC loads
// libcuda.so.1 itself and must not find this one.
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef int CUresult;
static int ctx_obj, stream_obj, mod_obj, func_obj, graph_obj, exec_obj, node_obj, pool_obj, ev_obj;
static void* cur_ctx = 0;
#define OK return 0
CUresult cuInit(unsigned f){OK;}
CUresult cuDriverGetVersion(int* v){*v=13000;OK;}
CUresult cuDeviceGetCount(int* c){*c=1;OK;}
CUresult cuDeviceGet(int* d,int o){*d=0;OK;}
CUresult cuDeviceGetName(char* n,int len,int d){strncpy(n,"Fake H100",len);OK;}
CUresult cuDeviceTotalMem_v2(size_t* b,int d){*b=(size_t)80<<30;OK;}
CUresult cuDeviceGetUuid(void* u,int d){memset(u,0,16);OK;}
CUresult cuDeviceGetUuid_v2(void* u,int d){memset(u,0,16);OK;}
CUresult cuDeviceGetAttribute(int* v,int a,int d){
  switch(a){case 1:*v=1024;break;case 2:case 3:*v=1024;break;case 4:*v=64;break;
  case 5:*v=2147483647;break;case 6:case 7:*v=65535;break;case 8:*v=49152;break;
  case 16:*v=132;break;case 75:*v=9;break;case 76:*v=0;break;case 97:*v=232448;break;
  case 38:*v=50<<20;break;case 10:*v=32;break;default:*v=1;}
  OK;}
CUresult cuDevicePrimaryCtxRetain(void** c,int d){*c=&ctx_obj;OK;}
CUresult cuDevicePrimaryCtxRelease_v2(int d){OK;}
CUresult cuDevicePrimaryCtxReset_v2(int d){OK;}
CUresult cuCtxSetCurrent(void* c){cur_ctx=c;OK;}
CUresult cuCtxGetCurrent(void** c){*c=cur_ctx;OK;}
CUresult cuCtxPushCurrent_v2(void* c){cur_ctx=c;OK;}
CUresult cuCtxPopCurrent_v2(void** c){if(c)*c=cur_ctx;OK;}
CUresult cuCtxSynchronize(void){OK;}
CUresult cuCtxGetDevice(int* d){*d=0;OK;}
CUresult cuCtxResetPersistingL2Cache(void){OK;}
CUresult cuStreamCreate(void** s,unsigned f){*s=&stream_obj;OK;}
CUresult cuStreamCreateWithPriority(void** s,unsigned f,int p){*s=&stream_obj;OK;}
CUresult cuStreamSynchronize(void* s){OK;}
CUresult cuStreamDestroy_v2(void* s){OK;}
CUresult cuStreamWaitEvent(void* s,void* e,unsigned f){OK;}
CUresult cuEventCreate(void** e,unsigned f){*e=&ev_obj;OK;}
CUresult cuEventRecord(void* e,void* s){OK;}
CUresult cuEventDestroy_v2(void* e){OK;}
CUresult cuEventSynchronize(void* e){OK;}
CUresult cuEventElapsedTime(float* ms,void* a,void* b){*ms=0.001f;OK;}
CUresult cuEventElapsedTime_v2(float* ms,void* a,void* b){*ms=0.001f;OK;}
CUresult cuMemAllocAsync(uint64_t* p,size_t n,void* s){*p=(uint64_t)calloc(1,n?n:1);OK;}
CUresult cuMemAlloc_v2(uint64_t* p,size_t n){*p=(uint64_t)calloc(1,n?n:1);OK;}
CUresult cuMemFreeAsync(uint64_t p,void* s){free((void*)p);OK;}
CUresult cuMemFree_v2(uint64_t p){free((void*)p);OK;}
CUresult cuMemcpyHtoDAsync_v2(uint64_t d,const void* h,size_t n,void* s){memcpy((void*)d,h,n);OK;}
CUresult cuMemcpyHtoD_v2(uint64_t d,const void* h,size_t n){memcpy((void*)d,h,n);OK;}
CUresult cuMemcpyDtoHAsync_v2(void* h,uint64_t d,size_t n,void* s){memcpy(h,(void*)d,n);OK;}
CUresult cuMemcpyDtoH_v2(void* h,uint64_t d,size_t n){memcpy(h,(void*)d,n);OK;}
CUresult cuMemcpyDtoDAsync_v2(uint64_t a,uint64_t b,size_t n,void* s){memcpy((void*)a,(void*)b,n);OK;}
CUresult cuMemsetD8Async(uint64_t d,unsigned char v,size_t n,void* s){memset((void*)d,v,n);OK;}
CUresult cuMemsetD16Async(uint64_t d,unsigned short v,size_t n,void* s){for(size_t i=0;i<n;i++)((unsigned short*)d)[i]=v;OK;}
CUresult cuMemsetD32Async(uint64_t d,unsigned v,size_t n,void* s){for(size_t i=0;i<n;i++)((unsigned*)d)[i]=v;OK;}
CUresult cuDeviceGetDefaultMemPool(void** p,int d){*p=&pool_obj;OK;}
CUresult cuMemPoolSetAttribute(void* p,int a,void* v){OK;}
CUresult cuModuleLoadData(void** m,const void* img){*m=&mod_obj;OK;}
CUresult cuModuleLoadDataEx(void** m,const void* img,unsigned n,void* o,void* v){*m=&mod_obj;OK;}
CUresult cuModuleGetFunction(void** f,void* m,const char* n){*f=&func_obj;OK;}
CUresult cuModuleUnload(void* m){OK;}
CUresult cuFuncGetAttribute(int* v,int a,void* f){*v=(a==0)?1024:0;OK;}
CUresult cuFuncSetAttribute(void* f,int a,int v){OK;}
CUresult cuFuncSetCacheConfig(void* f,int c){OK;}
CUresult cuLaunchKernel(void* f,unsigned a,unsigned b,unsigned c,unsigned d,unsigned e,unsigned g,unsigned sm,void* s,void** p,void** x){OK;}
CUresult cuGraphCreate(void** g,unsigned f){*g=&graph_obj;OK;}
CUresult cuGraphAddKernelNode_v2(void** n,void* g,const void* d,size_t k,const void* p){*n=&node_obj;OK;}
CUresult cuGraphInstantiateWithFlags(void** e,void* g,unsigned long long f){*e=&exec_obj;OK;}
CUresult cuGraphExecKernelNodeSetParams_v2(void* e,void* n,const void* p){OK;}
CUresult cuGraphLaunch(void* e,void* s){OK;}
CUresult cuGraphExecDestroy(void* e){OK;}
CUresult cuGraphDestroy(void* g){OK;}
CUresult cuGetErrorString(int e,const char** s){*s="fake error";OK;}
CUresult cuGetErrorName(int e,const char** s){*s="FAKE";OK;}
CUresult cuPointerGetAttribute(void* d,int a,uint64_t p){OK;}
CUresult cuCtxGetApiVersion(void* c,unsigned* v){*v=13000;OK;}
CUresult cuTensorMapEncodeTiled(void* m,int a,unsigned b,void* c,const void* d,const void* e,const void* f,const void* g,int h,int i,int j,int k){OK;}
