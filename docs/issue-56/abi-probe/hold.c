#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef struct { const char* ptr; size_t length; } buf;
extern void envoy_dynamic_module_callback_http_send_response_data(void* f, buf data, bool end_stream);
extern bool envoy_dynamic_module_callback_http_drain_body(void* f, uint32_t body_type, size_t n);
extern size_t envoy_dynamic_module_callback_http_get_body_size(void* f, uint32_t body_type);
extern void envoy_dynamic_module_callback_log(uint32_t level, buf msg);
typedef struct { int calls; bool cut; } st;
const char* envoy_dynamic_module_on_program_init(void) { return "v0.2.0"; }
const void* envoy_dynamic_module_on_http_filter_config_new(void* a, buf n, buf c) { return (const void*)1; }
void envoy_dynamic_module_on_http_filter_config_destroy(const void* c) {}
const void* envoy_dynamic_module_on_http_filter_new(const void* c, void* f) { return calloc(1, sizeof(st)); }
void envoy_dynamic_module_on_http_filter_destroy(const void* m) { free((void*)m); }
uint32_t envoy_dynamic_module_on_http_filter_request_headers(void* f, const void* m, bool e) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_request_body(void* f, const void* m, bool e) { return 0; }
uint32_t envoy_dynamic_module_on_http_filter_request_trailers(void* f, const void* m) { return 0; }
extern bool envoy_dynamic_module_callback_http_set_header(void* f, uint32_t t, buf k, buf v);
uint32_t envoy_dynamic_module_on_http_filter_response_headers(void* f, const void* m, bool e) { return 1; }
uint32_t envoy_dynamic_module_on_http_filter_response_body(void* f, const void* m, bool e) {
  if (!e) return 1;
  size_t n = envoy_dynamic_module_callback_http_get_body_size(f, 3);
  char v[32]; int len = snprintf(v, sizeof v, "held-%zu", n);
  static const char k[] = "x-core-check";
  bool ok = envoy_dynamic_module_callback_http_set_header(f, 2, (buf){k, sizeof k - 1}, (buf){v, (size_t)len});
  char msg[64]; int ml = snprintf(msg, sizeof msg, "holdprobe eos buffered %zu set_header %d", n, ok);
  envoy_dynamic_module_callback_log(3, (buf){msg, (size_t)ml});
  return 0;
}
uint32_t envoy_dynamic_module_on_http_filter_response_trailers(void* f, const void* m) { return 0; }
void envoy_dynamic_module_on_http_filter_stream_complete(void* f, const void* m) {
  static const char t[] = "cutprobe stream complete";
  envoy_dynamic_module_callback_log(3, (buf){t, sizeof t - 1});
}
void envoy_dynamic_module_on_http_filter_http_callout_done(void) {}
void envoy_dynamic_module_on_http_filter_http_stream_headers(void) {}
void envoy_dynamic_module_on_http_filter_http_stream_data(void) {}
void envoy_dynamic_module_on_http_filter_http_stream_trailers(void) {}
void envoy_dynamic_module_on_http_filter_http_stream_complete(void) {}
void envoy_dynamic_module_on_http_filter_http_stream_reset(void) {}
void envoy_dynamic_module_on_http_filter_scheduled(void) {}
void envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(void) {}
void envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(void) {}
