// The parameters of a convolution (conv_io.wgsl, depthwise.wgsl): NCHW sizes, stride, dilation,
// top/left padding, output size, offsets into X/W/bias, whether there is a bias, the activation.
struct Params {
    n: u32, c: u32, h: u32, w: u32,
    o: u32, kh: u32, kw: u32, groups: u32,
    sh: u32, sw: u32, dh: u32, dw: u32,
    pt: u32, pl: u32, ho: u32, wo: u32,
    x_off: u32, w_off: u32, b_off: u32, has_bias: u32,
    act: u32, unused0: u32, unused1: u32, unused2: u32,
}
