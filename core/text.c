/* core/text.c — handing a library-made text to the caller like snprintf,
 * the contract of every eplb_*_json function. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

void eplb__text_out(char *text, char *buf, size_t size, size_t *len) {
  size_t n = strlen(text);
  if (size) {
    size_t k = n < size - 1 ? n : size - 1;
    memcpy(buf, text, k);
    buf[k] = '\0';
  }
  free(text); /* json_dumps allocates with malloc, not through the user's hooks */
  if (len)
    *len = n;
}
