"""The textbook: read these files whole, in this order, the mathematics first.

activations.py (every activation as phi = rho(s) softmax(ell(s)) and its one
VJP, with each class's facts), scores.py (every score, forward and backward),
attention.py (score + activation + values, and back; the checks of its own
arguments close the file), gradcheck.py (a VJP against autograd and central
differences). Then the plumbing, which a reader may skip: backend.py (which
array module runs the formulas) and checks.py (the argument checks, kept out
of the formulas). Every backward pass: ``out, cache = forward(inputs)``, then
``grads = backward(grad_out, cache)``, the gradients in the order of the
inputs. Nothing here imports refattn outside this folder.
"""
