// kiln CPU prelude, part 4 declared: what a kernel's translation unit calls of the group
// scheduler when the scheduler (scheduler.h, faults.h) comes compiled once as an object linked
// into the kernel library. Hidden: each library keeps its own scheduler, as when it is compiled
// inline.
#pragma once

namespace kiln { namespace rt {

struct LaunchDesc;
struct StackSet;
__attribute__((visibility("hidden"))) int run_groups(Body body, DirectFn direct, bool cooperative, CoResume co_resume,
                                                     const LaunchDesc* d, uint64_t begin, uint64_t end,
                                                     StackSet* stacks, TgArena* arena, const char* const* tg_names,
                                                     char* msg, int msg_cap);

}  // namespace rt
}  // namespace kiln
