// Host buffers handed to CUPTI for activity records: a bounded number in flight, a few kept
// for reuse, zeroed before reuse off the application's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace hookmagic {

class BufferPool {
public:
    ~BufferPool();
    // Buffer size and the most buffers CUPTI may hold at once; call while none is out.
    void configure(size_t buffer_bytes, size_t max_out);
    // CUPTI's buffer request: a zeroed buffer, or none (nullptr, size 0) at the cap, in which
    // case CUPTI drops records and counts them.
    void request(uint8_t** buffer, size_t* size);
    // A buffer CUPTI handed back, after its first `valid` bytes were decoded.
    void release(uint8_t* buffer, size_t valid);
    uint64_t refused() const { return refused_; }
    uint64_t handed_out() const { return handed_out_; }
    size_t outstanding() const { return out_; }
    void reset_counters();

private:
    std::mutex mu_;
    std::vector<uint8_t*> free_;
    size_t buffer_bytes_ = 8u << 20;
    size_t max_out_ = 32;
    size_t out_ = 0;
    uint64_t refused_ = 0;
    uint64_t handed_out_ = 0;
};

}  // namespace hookmagic
