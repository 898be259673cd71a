#include "buffers.h"

#include <cstdlib>
#include <cstring>

namespace hookmagic {
namespace {
constexpr size_t kKeptForReuse = 4;
}

BufferPool::~BufferPool() {
    for (uint8_t* b : free_) std::free(b);
}

void BufferPool::configure(size_t buffer_bytes, size_t max_out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (buffer_bytes != buffer_bytes_) {
        for (uint8_t* b : free_) std::free(b);
        free_.clear();
    }
    buffer_bytes_ = buffer_bytes;
    max_out_ = max_out;
}

void BufferPool::request(uint8_t** buffer, size_t* size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (out_ >= max_out_) {
        // Returning no buffer makes CUPTI drop records, and count them, instead of letting a
        // runaway capture take the host's memory.
        ++refused_;
        *buffer = nullptr;
        *size = 0;
        return;
    }
    uint8_t* b = nullptr;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else {
        b = static_cast<uint8_t*>(std::calloc(1, buffer_bytes_));  // 16-byte aligned
    }
    if (b) {
        ++out_;
        ++handed_out_;
    }
    *buffer = b;
    *size = b ? buffer_bytes_ : 0;
}

void BufferPool::release(uint8_t* buffer, size_t valid) {
    if (!buffer) return;
    std::memset(buffer, 0, valid);  // CUPTI wrote only the first `valid` bytes
    std::lock_guard<std::mutex> lock(mu_);
    if (out_) --out_;
    if (free_.size() < kKeptForReuse)
        free_.push_back(buffer);
    else
        std::free(buffer);
}

void BufferPool::reset_counters() {
    std::lock_guard<std::mutex> lock(mu_);
    refused_ = 0;
    handed_out_ = 0;
}

}  // namespace hookmagic
