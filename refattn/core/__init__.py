"""The textbook: read these files whole, in this order.

backend.py (which array module runs the formulas), checks.py (the argument
checks, kept out of the formulas), activations.py (every activation as
phi = rho(s) softmax(ell(s)) and its one VJP), scores.py (every score, forward
and backward), attention.py (score + activation + values, and back),
gradcheck.py (a VJP against autograd and central differences). Every backward
pass: ``out, cache = forward(inputs)``, then ``grads = backward(grad_out, cache)``,
the gradients in the order of the inputs. Nothing here imports refattn outside this folder.
"""
