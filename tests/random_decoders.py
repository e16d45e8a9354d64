"""Random float decoders for the code-generator acceptance test of the upsampling ops
(tests/codegen/test_random_upsample.py): `random_decoder(seed)` builds one from a seed with `RandomNet`'s blocks
plus transposed convolutions, resizes, GELU and resize-into-CONCAT skips; `random_nets.quantized` makes it int8."""

from __future__ import annotations

from random_nets import RandomNet

from kilobyte.ir import ConcatAttrs, GeluAttrs, GraphBuilder, Op, ResizeAttrs, TransposeConvAttrs

MAX_SIDE = 40  # a larger map is shrunk back with a nearest resize: the bundle stays small


class RandomDecoder(RandomNet):
    """A random float decoder from one seed: convs, transposed convolutions (kernel 1-4, strides 1-3, SAME, VALID or
    PyTorch's padding + output_padding), nearest and bilinear resizes (random sizes up and down, every coordinate
    mode TFLite takes), optionally GELU (exact or tanh), and resizes written into a CONCAT's channel slice."""

    def __init__(self, seed: int, gelu: bool):
        super().__init__(seed)
        self.b = GraphBuilder(f"decoder_{seed}")
        self.gelu = gelu

    def transpose_conv(self, x):
        _, h, w, cin = self.b.shape(x)
        k = (int(self.rng.integers(1, 5)), int(self.rng.integers(1, 5)))
        s = (int(self.rng.integers(1, 4)), int(self.rng.integers(1, 4)))
        pad = []
        for kk, ss in zip(k, s):
            p = int(self.rng.integers(0, kk)) if self.rng.random() < 0.7 else 0
            pad += [p, p - int(self.rng.integers(0, ss))]  # crop before and after (output_padding < stride)
        sides = [(n - 1) * ss + kk - pad[2 * i] - pad[2 * i + 1] for i, (n, ss, kk) in enumerate(zip((h, w), s, k))]
        if min(sides) < 1:
            pad = [0, 0, 0, 0]
        cout = int(self.rng.integers(1, 10))
        attrs = TransposeConvAttrs(s, tuple(pad), self.act())
        return self.b.node(Op.TRANSPOSE_CONV, [x], attrs, params=self.params((cout, *k, cin), cout))

    def resize(self, x):
        _, h, w, _ = self.b.shape(x)
        size = tuple(max(1, int(round(n * self.rng.uniform(0.5, 2.5)))) for n in (h, w))
        if self.rng.random() < 0.5:
            flags = (bool(self.rng.random() < 0.5), bool(self.rng.random() < 0.5))
            return self.b.node(Op.RESIZE_NEAREST_NEIGHBOR, [x], ResizeAttrs(size, *flags))
        flags = self.pick([(False, False), (True, False), (False, True)])
        return self.b.node(Op.RESIZE_BILINEAR, [x], ResizeAttrs(size, *flags))

    def skip(self, x):
        """A 2x resize of x and a 1x1 conv of another 2x resize side by side in one CONCAT (both write into their
        slices)."""
        _, h, w, _ = self.b.shape(x)
        size = (h * 2, w * 2)
        up = self.b.node(self.pick([Op.RESIZE_NEAREST_NEIGHBOR, Op.RESIZE_BILINEAR]), [x],
                         ResizeAttrs(size, half_pixel_centers=bool(self.rng.random() < 0.5)))
        other = self.conv(self.b.node(Op.RESIZE_NEAREST_NEIGHBOR, [x], ResizeAttrs(size)), k=1, stride=1)
        return self.b.node(Op.CONCAT, [up, other], ConcatAttrs(3))

    def activation(self, x):
        return self.b.node(Op.GELU, [x], GeluAttrs(approximate=bool(self.rng.random() < 0.5)))


def random_decoder(seed: int, gelu: bool = False):
    """A `RandomDecoder` of 2-5 blocks on a (1, 2-7, 2-7, 1-5) input, ending in a 1x1 conv."""
    net = RandomDecoder(seed, gelu)
    rng = net.rng
    x = net.b.input((1, int(rng.integers(2, 8)), int(rng.integers(2, 8)), int(rng.integers(1, 6))))
    blocks = ["transpose_conv", "transpose_conv", "resize", "resize", "skip", "conv"] + ["activation"] * gelu
    for _ in range(int(rng.integers(2, 6))):
        block = net.pick(blocks)
        x = net.conv(x, k=3, stride=1) if block == "conv" else getattr(net, block)(x)
        if max(net.b.shape(x)[1:3]) > MAX_SIDE:
            x = net.b.node(Op.RESIZE_NEAREST_NEIGHBOR, [x], ResizeAttrs((MAX_SIDE // 2, MAX_SIDE // 2)))
    return net.b.build([net.conv(x, k=1, stride=1)])
