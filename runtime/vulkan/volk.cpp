// volk's implementation (the entry-point pointers and their loading), compiled once. Its own translation unit:
// volk.c declares the few Windows functions it calls itself, which <windows.h> (in loader.cpp) would contradict.
#define VOLK_IMPLEMENTATION
#include <volk.h>
