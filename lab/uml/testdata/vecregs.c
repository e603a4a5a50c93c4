/*
 * vecregs: which vector registers a process keeps across a busy loop, 100
 * system calls and 64 page faults. It loads XMM1, the upper halves of YMM1
 * and ZMM1, ZMM17 and the mask register K2 with known values, does the
 * event, reads them back and prints what was lost. Needs a CPU with
 * AVX-512 (F and BW). The measurement behind xstate_amd64.go:
 *
 *   gcc -O1 -o /tmp/vecregs lab/uml/testdata/vecregs.c
 *   /tmp/vecregs                                         # on the host
 *   sudo go run ./cmd/linklab uml --module sch_tbf /tmp/vecregs   # inside
 */
#include <stdio.h>
#include <unistd.h>
#include <sys/mman.h>

__attribute__((target("avx512f,avx512bw")))
static int check(int event, char *page)
{
	unsigned long long zmm1[8] = {0}, zmm17[8] = {0}, k2 = 0;
	__asm__ volatile(
		"mov $0x1111111111111111, %%rax\n vmovq %%rax, %%xmm1\n vpbroadcastq %%xmm1, %%zmm1\n"
		"mov $0x2222222222222222, %%rax\n vmovq %%rax, %%xmm2\n vpbroadcastq %%xmm2, %%zmm17\n"
		"mov $0x5a5a, %%rax\n kmovq %%rax, %%k2\n" ::: "rax", "xmm1", "xmm2", "xmm17", "k2");
	if (event == 1) {
		for (int i = 0; i < 100; i++)
			getppid();
	} else if (event == 2) {
		for (int i = 0; i < 64; i++)
			page[i * 4096] = 1;
	} else {
		for (volatile long i = 0; i < 200000000; i++)
			;
	}
	__asm__ volatile(
		"vmovdqu64 %%zmm1, (%0)\n vmovdqu64 %%zmm17, (%1)\n kmovq %%k2, %%rax\n mov %%rax, (%2)\n"
		:: "r"(zmm1), "r"(zmm17), "r"(&k2) : "rax", "memory");
	int lost = 0;
	if (zmm1[0] != 0x1111111111111111ULL) lost |= 1;  /* xmm1 */
	if (zmm1[2] != 0x1111111111111111ULL) lost |= 2;  /* ymm1's upper half */
	if (zmm1[4] != 0x1111111111111111ULL) lost |= 4;  /* zmm1's upper 256 bits */
	if (zmm17[0] != 0x2222222222222222ULL) lost |= 8; /* zmm17 */
	if (k2 != 0x5a5a) lost |= 16;                     /* k2 */
	return lost;
}

int main(void)
{
	const char *names[] = {"spin 0.2e9", "100 syscalls", "64 page faults"};
	for (int e = 0; e < 3; e++) {
		char *page = mmap(0, 64 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (page == MAP_FAILED)
			return 1;
		int lost = check(e, page);
		printf("%-16s lost:%s%s%s%s%s%s\n", names[e], lost & 1 ? " xmm" : "", lost & 2 ? " ymm-upper" : "",
		       lost & 4 ? " zmm-upper" : "", lost & 8 ? " zmm17" : "", lost & 16 ? " k2" : "", lost ? "" : " nothing");
	}
	return 0;
}
